//! The RabbitMQ sink and the forwarder against the real broker
//! (`DELAYQ_TEST_AMQP_URL`): 10,000 due jobs arrive once each with their
//! headers; an outage cut with a TCP proxy loses nothing and finishes nothing
//! unconfirmed; an unroutable (returned) message is a failure; a routing key past
//! 255 bytes fails its job alone.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Harness;
use delayq_common::{JobState, Timestamp};
use delayq_forward::testsuite::{self, Delivered, Destination};
use delayq_forward::RabbitSink;
use delayq_testkit::{eventually, service, unique_name, FaultProxy, Link};
use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::json;
use tokio::task::JoinHandle;

/// A message as the test consumer saw it.
#[derive(Clone, Debug)]
struct Arrival {
    headers: HashMap<String, String>,
    routing_key: String,
    persistent: bool,
    body: String,
    at: Timestamp,
}

/// A connection of the test itself (declares, consumes, cleans up), straight to the broker.
struct Broker {
    _connection: Connection,
    channel: Channel,
}

impl Broker {
    async fn connect(url: &str) -> Broker {
        let connection = Connection::connect(url, ConnectionProperties::default()).await.unwrap();
        let channel = connection.create_channel().await.unwrap();
        Broker { _connection: connection, channel }
    }

    /// Declares a queue the broker removes by itself two minutes after its last use,
    /// so a failed test leaves nothing behind for long.
    async fn declare_queue(&self, name: &str) {
        let mut arguments = FieldTable::default();
        arguments.insert("x-expires".into(), AMQPValue::LongInt(120_000));
        self.channel.queue_declare(name.into(), QueueDeclareOptions::default(), arguments).await.unwrap();
    }

    async fn declare_exchange(&self, name: &str) {
        let options = ExchangeDeclareOptions { auto_delete: true, ..ExchangeDeclareOptions::default() };
        self.channel.exchange_declare(name.into(), ExchangeKind::Topic, options, FieldTable::default()).await.unwrap();
    }

    /// Consumes `queue` (auto-ack) into a shared list.
    async fn consume(&self, queue: &str) -> (Arc<Mutex<Vec<Arrival>>>, JoinHandle<()>) {
        let mut consumer = self
            .channel
            .basic_consume(
                queue.into(),
                ShortString::from(unique_name("consumer")),
                BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() },
                FieldTable::default(),
            )
            .await
            .unwrap();
        let arrivals: Arc<Mutex<Vec<Arrival>>> = Arc::default();
        let sink = arrivals.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(delivery)) = consumer.next().await {
                let headers = delivery
                    .properties
                    .headers()
                    .as_ref()
                    .map(|table| {
                        table
                            .inner()
                            .iter()
                            .map(|(key, value)| {
                                let text = match value {
                                    AMQPValue::LongString(text) => text.to_string(),
                                    other => format!("{other:?}"),
                                };
                                (key.to_string(), text)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                sink.lock().unwrap().push(Arrival {
                    headers,
                    routing_key: delivery.routing_key.to_string(),
                    persistent: *delivery.properties.delivery_mode() == Some(2),
                    body: String::from_utf8_lossy(&delivery.data).into_owned(),
                    at: Timestamp::now(),
                });
            }
        });
        (arrivals, task)
    }

    /// Declares a queue named after `stem` and starts consuming it.
    async fn queue(&self, stem: &str) -> TestQueue {
        let name = unique_name(stem);
        self.declare_queue(&name).await;
        let (arrivals, consumer) = self.consume(&name).await;
        TestQueue { name, exchange: None, arrivals, consumer }
    }

    /// Declares a topic exchange and a queue it routes `pattern` to, both named
    /// after `stem`, and starts consuming the queue.
    async fn bound_queue(&self, stem: &str, pattern: &str) -> TestQueue {
        let exchange = unique_name(&format!("{stem}-x"));
        self.declare_exchange(&exchange).await;
        let mut queue = self.queue(&format!("{stem}-q")).await;
        let (queue_name, exchange_name) = (queue.name.as_str().into(), exchange.as_str().into());
        let options = QueueBindOptions::default();
        self.channel
            .queue_bind(queue_name, exchange_name, pattern.into(), options, FieldTable::default())
            .await
            .unwrap();
        queue.exchange = Some(exchange);
        queue
    }

    /// Stops consuming `queue` and deletes it, with its exchange.
    async fn remove(&self, queue: TestQueue) {
        queue.consumer.abort();
        self.delete_queue(&queue.name).await;
        if let Some(exchange) = &queue.exchange {
            self.delete_exchange(exchange).await;
        }
    }

    async fn delete_queue(&self, name: &str) {
        let _ = self.channel.queue_delete(name.into(), QueueDeleteOptions::default()).await;
    }

    async fn delete_exchange(&self, name: &str) {
        let _ = self.channel.exchange_delete(name.into(), ExchangeDeleteOptions::default()).await;
    }
}

/// A queue of the test's own, the consumer recording what arrives in it, and
/// the exchange bound to it if any.
struct TestQueue {
    name: String,
    exchange: Option<String>,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    consumer: JoinHandle<()>,
}

/// Counts the arrivals per delayq-id.
fn arrivals_by_id(arrivals: &Mutex<Vec<Arrival>>) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for arrival in arrivals.lock().unwrap().iter() {
        *counts.entry(arrival.headers.get("delayq-id").cloned().unwrap_or_default()).or_insert(0) += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_due_jobs_arrive_in_the_bound_queue_once_each_with_their_headers() {
    let Some(url) = service("DELAYQ_TEST_AMQP_URL") else { return };
    let broker = Broker::connect(&url).await;
    let queue = broker.bound_queue("delayq-fwd", "due.#").await;
    let (exchange, arrivals) = (queue.exchange.clone().unwrap(), Arc::clone(&queue.arrivals));

    let sink = Arc::new(RabbitSink::new(&url, &exchange, "due.{topic}.{subtopic}", Duration::from_secs(10)).unwrap());
    let harness = Harness::start(&["order.*"], sink, |_| {}).await;
    const JOBS: usize = 10_000;
    let jobs = (0..JOBS)
        .map(|i| {
            json!({"topic": "order.close", "subtopic": format!("s{}", i % 3), "body": format!("job-{i}"),
                   "delay": 1000 + (i * 7919) % 2001})
        })
        .collect();
    let ids = harness.push_all(jobs).await;

    let all_arrived = eventually(Duration::from_secs(60), || async { arrivals_by_id(&arrivals).len() >= JOBS }).await;
    let counts = arrivals_by_id(&arrivals);
    assert!(all_arrived, "only {} of {JOBS} jobs arrived", counts.len());
    for id in &ids {
        assert!(counts.contains_key(id.as_str()), "job {id} never arrived");
    }
    let duplicates: usize = counts.values().map(|count| count - 1).sum();
    let counters = harness.route().counters();
    let possible_duplicates = counters.unconfirmed() + counters.unfinished();
    assert!(
        duplicates as u64 <= possible_duplicates,
        "{duplicates} duplicates but only {possible_duplicates} unconfirmed or unfinished publishes"
    );
    {
        let arrivals = arrivals.lock().unwrap();
        for arrival in arrivals.iter() {
            assert!(arrival.persistent, "persistent messages");
            assert_eq!(arrival.headers["delayq-topic"], "order.close");
            assert_eq!(arrival.headers["delayq-attempt"], "1");
            let run_at: u64 = arrival.headers["delayq-run-at"].parse().unwrap();
            assert!(run_at <= arrival.at.as_millis(), "never before the due time");
            let index: usize = arrival.body.strip_prefix("job-").unwrap().parse().unwrap();
            assert_eq!(arrival.routing_key, format!("due.order.close.s{}", index % 3));
        }
    }
    let all_finished = harness.drains(Duration::from_secs(10)).await;
    assert!(all_finished, "every confirmed job is finished");
    assert_eq!(counters.published(), JOBS as u64 + counters.unfinished());
    assert_eq!(harness.state(&ids[0]).await, JobState::Finished);
    broker.remove(queue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_message_is_a_failure_and_the_job_dies_after_max_retries() {
    let Some(url) = service("DELAYQ_TEST_AMQP_URL") else { return };
    let broker = Broker::connect(&url).await;
    // An exchange with no queue bound: a mandatory publish comes back.
    let exchange = unique_name("delayq-fwd-nowhere");
    broker.declare_exchange(&exchange).await;
    let sink = Arc::new(RabbitSink::new(&url, &exchange, "{topic}", Duration::from_secs(5)).unwrap());
    let harness = Harness::start(&["lost.*"], sink, |_| {}).await;
    let ids =
        harness.push_all(vec![json!({"topic": "lost.job", "body": "b", "maxRetries": 1, "retryBackoff": [100]})]).await;
    let dead = harness.reaches(&ids[0], JobState::Dead, Duration::from_secs(15)).await;
    assert!(dead, "a returned message is not a delivery");
    let counters = harness.route().counters();
    assert_eq!((counters.published(), counters.failed(), counters.dead()), (0, 2, 1));
    broker.delete_exchange(&exchange).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_fifteen_seconds_loses_nothing_and_finishes_nothing_unconfirmed() {
    let Some(url) = service("DELAYQ_TEST_AMQP_URL") else { return };
    let mut parsed = reqwest::Url::parse(&url).unwrap();
    let upstream = format!("{}:{}", parsed.host_str().unwrap(), parsed.port().unwrap_or(5672));
    let proxy = FaultProxy::start(&upstream, Link::Up).await;
    parsed.set_host(Some("127.0.0.1")).unwrap();
    parsed.set_port(Some(proxy.address().port())).unwrap();
    let proxied_url = parsed.to_string();

    let broker = Broker::connect(&url).await;
    let queue = broker.queue("delayq-fwd-outage").await;
    let arrivals = Arc::clone(&queue.arrivals);
    // The default exchange routes by queue name.
    let sink = Arc::new(RabbitSink::new(&proxied_url, "", &queue.name, Duration::from_secs(3)).unwrap());
    let harness = Harness::start(&["outage.*"], sink, |_| {}).await;

    const JOBS: usize = 300;
    let jobs = (0..JOBS)
        .map(|i| {
            json!({"topic": "outage.jobs", "body": format!("job-{i}"), "delay": 300 + i * 30,
                   "maxRetries": 1000, "retryBackoff": [250, 500, 1000]})
        })
        .collect();
    let ids = harness.push_all(jobs).await;
    let some_arrived = eventually(Duration::from_secs(10), || async { !arrivals.lock().unwrap().is_empty() }).await;
    assert!(some_arrived, "the broker is reachable through the proxy");

    proxy.set(Link::Down);
    // Finishes of jobs confirmed just before the cut may still land; after that nothing can be confirmed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let published_at_cut = harness.route().counters().published();
    let arrived_at_cut = arrivals_by_id(&arrivals).len();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let counters = harness.route().counters();
    assert_eq!(counters.published(), published_at_cut, "no job is finished while the broker is unreachable");
    assert!(counters.failed() > 0, "jobs fell due during the outage and failed to publish");
    assert!(arrived_at_cut < JOBS, "jobs were still due when the broker went away");
    let finished_during_outage = finished_ids(&harness, &ids).await;
    let arrived = arrivals_by_id(&arrivals);
    for id in &finished_during_outage {
        assert!(arrived.contains_key(id.as_str()), "job {id} finished but never reached the broker");
    }

    proxy.set(Link::Up);
    let all_arrived = eventually(Duration::from_secs(30), || async { arrivals_by_id(&arrivals).len() >= JOBS }).await;
    let arrived = arrivals_by_id(&arrivals);
    assert!(all_arrived, "after the outage every job arrives: {} of {JOBS}", arrived.len());
    let all_finished = harness.drains(Duration::from_secs(15)).await;
    assert!(all_finished, "every job is finished once confirmed");
    let duplicates: usize = arrived.values().map(|count| count - 1).sum();
    assert!(duplicates as u64 <= counters.unconfirmed() + counters.unfinished(), "duplicates are counted");
    broker.remove(queue).await;
}

/// Returns the ids of the jobs the store knows as finished.
async fn finished_ids(harness: &Harness, ids: &[delayq_common::JobId]) -> HashSet<String> {
    let mut finished = HashSet::new();
    for id in ids {
        if harness.state(id).await == JobState::Finished {
            finished.insert(id.to_string());
        }
    }
    finished
}

/// What arrived in a queue, as the conformance checks read it.
struct QueueDestination(Arc<Mutex<Vec<Arrival>>>);

#[async_trait::async_trait]
impl Destination for QueueDestination {
    async fn delivered(&self) -> Vec<Delivered> {
        let arrivals = self.0.lock().unwrap().clone();
        arrivals
            .into_iter()
            .map(|arrival| Delivered { headers: arrival.headers.into_iter().collect(), body: arrival.body })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rabbitmq_sink_passes_the_conformance_checks() {
    let Some(url) = service("DELAYQ_TEST_AMQP_URL") else { return };
    let broker = Broker::connect(&url).await;
    let queue = broker.queue("delayq-fwd-conformance").await;
    let sink = RabbitSink::new(&url, "", &queue.name, Duration::from_secs(5)).unwrap();
    let destination = QueueDestination(Arc::clone(&queue.arrivals));
    testsuite::confirms_every_job_with_its_headers_and_body(&sink, &destination).await;
    testsuite::an_empty_batch_publishes_nothing(&sink, &destination).await;
    broker.remove(queue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routing_key_past_255_bytes_fails_its_job_alone_and_its_batch_mates_arrive_once() {
    let Some(url) = service("DELAYQ_TEST_AMQP_URL") else { return };
    let broker = Broker::connect(&url).await;
    let queue = broker.bound_queue("delayq-fwd-bytes", "#").await;
    let (exchange, arrivals) = (queue.exchange.clone().unwrap(), Arc::clone(&queue.arrivals));
    let sink = Arc::new(RabbitSink::new(&url, &exchange, "{topic}.{subtopic}", Duration::from_secs(5)).unwrap());
    let harness = Harness::start(&["bytes.*"], sink, |_| {}).await;

    let job = |subtopic: String, body: String| {
        json!({"topic": "bytes.job", "subtopic": subtopic, "body": body, "delay": 300,
               "maxRetries": 1, "retryBackoff": [100]})
    };
    let mut jobs: Vec<_> = (0..99).map(|i| job(format!("s{i}"), format!("job-{i}"))).collect();
    // 64 characters, 256 bytes: "bytes.job." plus it is 266 bytes, past AMQP's 255.
    jobs.insert(50, job("😀".repeat(64), "big".to_owned()));
    let ids = harness.push_all(jobs).await;
    let big = ids[50].clone();
    let ordinary: Vec<_> = ids.iter().filter(|id| **id != big).cloned().collect();

    let all_arrived = eventually(Duration::from_secs(15), || async { arrivals_by_id(&arrivals).len() >= 99 }).await;
    assert!(all_arrived, "only {} of the 99 batch-mates arrived", arrivals_by_id(&arrivals).len());
    let dead = harness.reaches(&big, JobState::Dead, Duration::from_secs(15)).await;
    assert!(dead, "the job whose routing key the broker cannot take is dead after maxRetries");
    let all_finished = harness.all_reach(&ordinary, JobState::Finished, Duration::from_secs(10)).await;
    assert!(all_finished, "every batch-mate is finished");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = arrivals_by_id(&arrivals);
    for id in &ordinary {
        assert_eq!(counts.get(id.as_str()), Some(&1), "job {id} arrives exactly once");
    }
    assert!(!counts.contains_key(big.as_str()), "the oversized job never reaches the broker");
    assert_eq!(counts.len(), 99);
    let counters = harness.route().counters();
    assert_eq!((counters.published(), counters.failed(), counters.dead()), (99, 2, 1));
    assert_eq!(counters.unconfirmed(), 0, "a refused destination is not a possible duplicate");
    broker.remove(queue).await;
}
