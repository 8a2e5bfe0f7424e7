//! The Kafka sink and the forwarder against librdkafka's mock cluster:
//! 10,000 due jobs arrive on the configured topic with the configured keys and
//! the delayq-* headers; a job whose expanded topic name is invalid fails alone.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::Harness;
use delayq_forward::testsuite::{self, Delivered, Destination};
use delayq_forward::{KafkaSink, Sink, SinkError};
use delayq_testkit::{eventually, unique_name};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use serde_json::json;

/// A record as the test consumer saw it.
struct Record {
    key: String,
    headers: HashMap<String, String>,
    payload: String,
}

/// Reads records from `topic` until `count` distinct delayq-ids arrived or `limit` passed.
fn consume(bootstrap: &str, topic: &str, count: usize, limit: Duration) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique_name("delayq-test"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let start = Instant::now();
    let mut records = Vec::new();
    let mut distinct = std::collections::HashSet::new();
    while distinct.len() < count && start.elapsed() < limit {
        let Some(polled) = consumer.poll(Duration::from_millis(200)) else { continue };
        let message = polled.unwrap();
        let mut headers = HashMap::new();
        if let Some(all) = message.headers() {
            for header in all.iter() {
                let value = header.value.map(|value| String::from_utf8_lossy(value).into_owned()).unwrap_or_default();
                headers.insert(header.key.to_owned(), value);
            }
        }
        let record = Record {
            key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
            headers,
            payload: String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned(),
        };
        distinct.insert(record.headers.get("delayq-id").cloned().unwrap_or_default());
        records.push(record);
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_due_jobs_arrive_on_the_mock_cluster_with_their_keys() {
    let cluster = MockCluster::new(3).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let topic = "delayq-audit-due";
    cluster.create_topic(topic, 4, 3).unwrap();

    let mut properties = BTreeMap::new();
    properties.insert("linger.ms".to_owned(), "5".to_owned());
    let sink = KafkaSink::new(&bootstrap, "delayq-{topic}-due", &properties, Duration::from_secs(10)).unwrap();
    let harness = Harness::start(&["audit"], std::sync::Arc::new(sink), |_| {}).await;
    const JOBS: usize = 10_000;
    let jobs = (0..JOBS)
        .map(|i| {
            // Every other job has a subtopic: it is the key; the others are keyed by id.
            let subtopic = i.is_multiple_of(2).then(|| format!("customer-{}", i % 17));
            json!({"topic": "audit", "subtopic": subtopic, "body": format!("job-{i}"), "delay": (i % 500)})
        })
        .collect();
    let ids = harness.push_all(jobs).await;
    let index_of: HashMap<String, usize> = ids.iter().enumerate().map(|(index, id)| (id.to_string(), index)).collect();

    let consumer_bootstrap = bootstrap.clone();
    let records = tokio::task::spawn_blocking(move || {
        consume(&consumer_bootstrap, "delayq-audit-due", JOBS, Duration::from_secs(60))
    })
    .await
    .unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for record in &records {
        let id = &record.headers["delayq-id"];
        let index = index_of[id];
        assert_eq!(record.payload, format!("job-{index}"));
        let expected_key = if index.is_multiple_of(2) { format!("customer-{}", index % 17) } else { id.clone() };
        assert_eq!(record.key, expected_key, "the key is the subtopic, else the id");
        assert_eq!(record.headers["delayq-topic"], "audit");
        assert_eq!(record.headers["delayq-attempt"], "1");
        assert!(record.headers["delayq-run-at"].parse::<u64>().is_ok());
        *seen.entry(id.clone()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), JOBS, "every job arrives");
    let duplicates: usize = seen.values().map(|count| count - 1).sum();
    let counters = harness.route().counters();
    assert!(duplicates as u64 <= counters.unconfirmed() + counters.unfinished(), "duplicates are counted");
    let all_finished = harness.drains(Duration::from_secs(10)).await;
    assert!(all_finished, "every delivered job is finished");
    assert!(counters.published() >= JOBS as u64);
    drop(harness);
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_expanded_topic_is_invalid_fails_alone_and_its_batch_mates_arrive() {
    let cluster = MockCluster::new(1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("delayq-bytes-eu", 1, 1).unwrap();
    let destination = TopicDestination::start(&bootstrap, "delayq-bytes-eu");
    let sink =
        KafkaSink::new(&bootstrap, "delayq-bytes-{subtopic}", &BTreeMap::new(), Duration::from_secs(10)).unwrap();
    let mut jobs = testsuite::sample_jobs("bytes", 3);
    for job in &mut jobs {
        job.subtopic = Some("eu".to_owned());
    }
    jobs[1].subtopic = Some("😀".repeat(64));
    let started = Instant::now();
    let outcomes = sink.publish(&jobs).await;
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    assert!(
        matches!(&outcomes[1], Err(SinkError::Rejected { sink: "kafka", .. })),
        "refused, not timed out: {outcomes:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "refused at once, not after the delivery timeout");
    let arrived = eventually(Duration::from_secs(10), || async { destination.delivered().await.len() >= 2 }).await;
    assert!(arrived);
    let delivered = destination.delivered().await;
    let ids: Vec<&str> = delivered.iter().map(|message| message.headers["delayq-id"].as_str()).collect();
    assert_eq!(ids, [jobs[0].id.as_str(), jobs[2].id.as_str()]);
    drop(destination);
    drop(sink);
    drop(cluster);
}

#[test]
fn properties_delayq_sets_itself_cannot_be_overridden() {
    let mut properties = BTreeMap::new();
    properties.insert("acks".to_owned(), "1".to_owned());
    let error = KafkaSink::new("127.0.0.1:9092", "{topic}", &properties, Duration::from_secs(1)).err().unwrap();
    assert!(error.to_string().contains("acks"), "{error}");
    let error = KafkaSink::new("127.0.0.1:9092", "{topik}", &BTreeMap::new(), Duration::from_secs(1)).err().unwrap();
    assert!(error.to_string().contains("kafka_topic"), "{error}");
}

/// Records of a topic, read by a consumer thread, as the conformance checks read them.
struct TopicDestination {
    records: std::sync::Arc<std::sync::Mutex<Vec<Delivered>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl TopicDestination {
    fn start(bootstrap: &str, topic: &str) -> TopicDestination {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", unique_name("delayq-conformance"))
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&[topic]).unwrap();
        let records: std::sync::Arc<std::sync::Mutex<Vec<Delivered>>> = Default::default();
        let stop: std::sync::Arc<std::sync::atomic::AtomicBool> = Default::default();
        let (sink, stopped) = (records.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) else { continue };
                let headers = message
                    .headers()
                    .map(|all| {
                        all.iter()
                            .map(|header| {
                                let value = header.value.map(|value| String::from_utf8_lossy(value).into_owned());
                                (header.key.to_owned(), value.unwrap_or_default())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let body = String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned();
                sink.lock().unwrap().push(Delivered { headers, body });
            }
        });
        TopicDestination { records, stop }
    }
}

impl Drop for TopicDestination {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Destination for TopicDestination {
    async fn delivered(&self) -> Vec<Delivered> {
        self.records.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_sink_passes_the_conformance_checks() {
    let cluster = MockCluster::new(1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("conformance.jobs", 1, 1).unwrap();
    let destination = TopicDestination::start(&bootstrap, "conformance.jobs");
    let sink = KafkaSink::new(&bootstrap, "{topic}", &BTreeMap::new(), Duration::from_secs(10)).unwrap();
    testsuite::confirms_every_job_with_its_headers_and_body(&sink, &destination).await;
    testsuite::an_empty_batch_publishes_nothing(&sink, &destination).await;
    drop(destination);
    drop(sink);
    drop(cluster);
}
