//! Recovery of the distributed deployment: nothing acknowledged is lost
//! whatever Redis or MariaDB do, and nobody has to call `/reStore`.
//!
//! Each test runs `delayq serve` on Redis + MariaDB with a database of its own.
//! A test that empties or restarts Redis starts its own `redis-server`; the
//! MariaDB outage is a TCP proxy between delayq and the shared server that the
//! test cuts (the shared services are never stopped).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{unique_name, Client, Server};
use delayq_testkit::{eventually, service, FaultProxy, Link, RedisProcess};
use serde_json::{json, Value};
use sqlx::Connection;
use tokio::task::JoinHandle;

const TTR_MS: u64 = 30_000;

/// When each job was handed to a consumer.
type Deliveries = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

/// The environment of a node on `redis_url` and `database_url`.
fn node_env<'a>(redis_url: &'a str, database_url: &'a str, prefix: &'a str) -> Vec<(&'static str, &'a str)> {
    common::distributed_env(redis_url, database_url, prefix, "recovery")
}

/// Pops, records and finishes jobs of `topic` until aborted; a finish that
/// meets an unavailable backend is retried.
fn spawn_consumers(client: &Client, topic: &'static str, count: usize, deliveries: &Deliveries) -> Vec<JoinHandle<()>> {
    (0..count)
        .map(|_| {
            let (client, deliveries) = (client.clone(), Arc::clone(deliveries));
            tokio::spawn(async move {
                common::consume(&client, topic, |ids| {
                    let seen = Instant::now();
                    {
                        let mut deliveries = deliveries.lock().expect("lock");
                        for id in &ids {
                            deliveries.entry(id.clone()).or_default().push(seen);
                        }
                    }
                    common::finish_all(&client, ids, 150)
                })
                .await;
            })
        })
        .collect()
}

/// Waits until every id of `expected` was delivered, or fails after `limit`.
async fn wait_for_deliveries(deliveries: &Deliveries, expected: &[String], limit: Duration, server: &Server) {
    let undelivered = || -> Vec<String> {
        let deliveries = deliveries.lock().expect("lock");
        expected.iter().filter(|id| !deliveries.contains_key(*id)).cloned().collect()
    };
    let all_delivered = eventually(limit, || async { undelivered().is_empty() }).await;
    let missing = undelivered();
    assert!(
        all_delivered,
        "{} of {} acknowledged jobs never delivered (first: {:?}); log:\n{}",
        missing.len(),
        expected.len(),
        &missing[..missing.len().min(5)],
        tail(&server.log())
    );
}

/// Returns the ids delivered twice less than a ttr apart.
fn delivered_twice_within_ttr(deliveries: &Deliveries) -> Vec<String> {
    let ttr = Duration::from_millis(TTR_MS);
    let deliveries = deliveries.lock().expect("lock");
    deliveries
        .iter()
        .filter(|(_, times)| times.windows(2).any(|pair| pair[1].duration_since(pair[0]) < ttr))
        .map(|(id, _)| id.clone())
        .collect()
}

/// Returns the value of a counter in the Prometheus text of `/metrics`.
async fn counter(client: &Client, name: &str) -> f64 {
    let (status, text) = client.get_text("/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.trim().parse::<f64>().ok()))
        .unwrap_or(0.0)
}

/// Waits (a few seconds at most) until the server's log contains `text`.
async fn wait_for_log(server: &Server, text: &str) {
    if eventually(Duration::from_secs(10), || async { server.log().contains(text) }).await {
        return;
    }
    panic!(
        "the log never said {text:?}:\n{}\nrecovery and store metrics:\n{}",
        tail(&server.log()),
        recovery_metrics(&server.client()).await
    );
}

/// The lines of `/metrics` about recovery and the store, to tell a stalled
/// reconciliation from one that found nothing to do.
async fn recovery_metrics(client: &Client) -> String {
    match client.get_text("/metrics").await {
        Ok((_, text)) => text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter(|line| {
                ["reconcil", "restored", "data_loss", "store_commit", "leader"].iter().any(|word| line.contains(word))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(error) => format!("(no metrics: {error})"),
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// 10,000 jobs due in 1–5 s; Redis is emptied by FLUSHALL while they are being
/// delivered. The leader notices and restores by itself: every job is
/// delivered, none twice within its ttr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_halfway_loses_no_job() {
    const JOBS: usize = 10_000;
    let Some(mysql_url) = service("DELAYQ_TEST_MYSQL_URL") else { return };
    let name = unique_name("dq_e2e_flushall");
    let database_url = common::fresh_database(&mysql_url, &name, None).await;
    let Some(redis) = RedisProcess::start().await else { return };
    let redis_url = redis.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &node_env(&redis_url, &database_url, &name)).await;
    let client = server.client();
    let deliveries: Deliveries = Arc::default();
    let consumers = spawn_consumers(&client, "recovery.flush", 4, &deliveries);

    let mut pushed = Vec::with_capacity(JOBS);
    for batch in (0..JOBS).collect::<Vec<_>>().chunks(1_000) {
        let jobs: Vec<Value> = batch
            .iter()
            .map(|index| {
                let delay = 1_000 + (index * 7919) % 4_000;
                json!({"topic": "recovery.flush", "body": format!("job {index}"), "delay": delay, "ttr": TTR_MS})
            })
            .collect();
        let (status, answer) = client.post("/push/batch", &json!({ "jobs": jobs })).await.expect("push batch");
        assert_eq!(status, 200, "{answer}");
        for item in answer["data"].as_array().expect("array") {
            pushed.push(item["id"].as_str().unwrap_or_else(|| panic!("refused: {item}")).to_owned());
        }
    }
    // Halfway through the deliveries, Redis loses everything.
    let halfway =
        eventually(Duration::from_secs(30), || async { deliveries.lock().expect("lock").len() >= JOBS / 2 }).await;
    assert!(halfway, "half the jobs did not arrive in time; log:\n{}", tail(&server.log()));
    redis.cli(&["flushall"]);
    let delivered_before = deliveries.lock().expect("lock").len();
    println!("flushall after {delivered_before} of {JOBS} deliveries");

    wait_for_deliveries(&deliveries, &pushed, Duration::from_secs(90), &server).await;
    // Give a duplicate, if any, the chance to show up.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for consumer in consumers {
        consumer.abort();
    }
    let twice = delivered_twice_within_ttr(&deliveries);
    assert!(
        twice.is_empty(),
        "{} jobs delivered twice within their ttr: {:?}",
        twice.len(),
        &twice[..twice.len().min(5)]
    );
    assert!(counter(&client, "delayq_scheduler_data_losses_total").await >= 1.0, "the loss is counted");
    wait_for_log(&server, "scheduler lost its data").await;
    wait_for_log(&server, "scheduler restored from the store").await;
    server.terminate().await;
}

/// The store is cut off for 10 s during a stream of pushes: those pushes get
/// 503 (never 200), pops keep working, and afterwards every acknowledged job
/// is delivered by the same process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_outage_refuses_pushes_and_loses_nothing() {
    let (Some(redis_url), Some(mysql_url)) = (service("DELAYQ_TEST_REDIS_URL"), service("DELAYQ_TEST_MYSQL_URL"))
    else {
        return;
    };
    let proxy = FaultProxy::start("127.0.0.1:3306", Link::Up).await;
    let name = unique_name("dq_e2e_db_outage");
    let database_url = common::fresh_database(&mysql_url, &name, Some(&proxy.address().to_string())).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &node_env(&redis_url, &database_url, &name)).await;
    let client = server.client();
    let deliveries: Deliveries = Arc::default();
    let consumers = spawn_consumers(&client, "recovery.db", 2, &deliveries);

    // A job that is ready before the outage, to pop while the store is away.
    let (status, answer) = client
        .post("/push", &json!({"topic": "recovery.db.read", "body": "read me", "id": format!("{name}-read")}))
        .await
        .expect("push");
    assert_eq!(status, 200, "{answer}");

    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let pusher = {
        let (client, stop, refused) = (client.clone(), Arc::clone(&stop), Arc::clone(&refused));
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut index = 0u64;
            while !stop.load(Ordering::SeqCst) {
                index += 1;
                let job = json!({"topic": "recovery.db", "body": format!("job {index}"), "delay": 300, "ttr": TTR_MS});
                let started = Instant::now();
                let (status, answer) = client.post("/push", &job).await.expect("the server answers");
                let took = started.elapsed();
                match status {
                    200 => acknowledged.push(answer["data"]["id"].as_str().expect("id").to_owned()),
                    503 => {
                        assert!(took < Duration::from_secs(5), "a refused push took {took:?}");
                        refused.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    other => panic!("push answered {other}: {answer}"),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            acknowledged
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set(Link::Down);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused_early = refused.load(Ordering::SeqCst);
    let (status, popped) =
        client.get("/pop?topic=recovery.db.read&timeout=1000").await.expect("pop while the store is down");
    assert_eq!(status, 200, "reads Redis can answer keep working: {popped}");
    assert_eq!(popped["data"].as_array().map(Vec::len), Some(1), "{popped}");
    tokio::time::sleep(Duration::from_secs(9)).await;
    let refused_during = refused.load(Ordering::SeqCst);
    proxy.set(Link::Up);
    // A push already on its way when the store came back may still be refused:
    // count from a second later, once the writer had the chance to reconnect.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused_until_back = refused.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let acknowledged = pusher.await.expect("pusher");
    println!(
        "{} pushes acknowledged, {refused_until_back} refused ({refused_early} in the first second, \
         {refused_during} by the time the store came back)",
        acknowledged.len()
    );
    assert!(refused_during > 0, "pushes were refused while the store was away");
    assert_eq!(refused.load(Ordering::SeqCst), refused_until_back, "pushes work again once the store is back");

    wait_for_deliveries(&deliveries, &acknowledged, Duration::from_secs(60), &server).await;
    for consumer in consumers {
        consumer.abort();
    }
    assert!(server.terminate().await, "the same process served throughout and stops cleanly");
}

/// A crash between the store write and the Redis write of a push: after the
/// restart the job is delivered, without anyone calling `/reStore`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_store_and_redis_write_keeps_the_job() {
    let (Some(redis_url), Some(mysql_url)) = (service("DELAYQ_TEST_REDIS_URL"), service("DELAYQ_TEST_MYSQL_URL"))
    else {
        return;
    };
    let name = unique_name("dq_e2e_crash");
    let database_url = common::fresh_database(&mysql_url, &name, None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut env = node_env(&redis_url, &database_url, &name);
    env.push(("DELAYQ_FAILPOINT", "push-after-store"));
    let crashing = Server::start(dir.path(), &env).await;
    // The first node's recovery marks the new prefix's shards in Redis. Were it
    // to crash before that, the next node would find them unmarked, take Redis
    // for emptied and restore the job instead of reconciling it back.
    wait_for_log(&crashing, "scheduler restored from the store").await;
    let id = format!("{name}-job");
    let job = json!({"topic": "recovery.crash", "body": "survive", "id": id});
    let answer = crashing.client().post("/push", &job).await;
    assert!(answer.is_err(), "the process died before answering: {answer:?}");
    let mut database = sqlx::MySqlConnection::connect(&database_url).await.expect("connect");
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job WHERE id = ?")
        .bind(&id)
        .fetch_one(&mut database)
        .await
        .expect("query the store");
    assert_eq!(stored, 1, "the failpoint sits after the store write");
    crashing.kill9().await;

    let server = Server::start(dir.path(), &node_env(&redis_url, &database_url, &name)).await;
    let (status, popped) = server.client().get("/pop?topic=recovery.crash&timeout=15000").await.expect("pop");
    assert_eq!(status, 200, "{popped}");
    let ids: Vec<&str> = popped["data"].as_array().into_iter().flatten().filter_map(|job| job["id"].as_str()).collect();
    assert_eq!(ids, [id.as_str()], "the job stored before the crash is delivered; log:\n{}", tail(&server.log()));
    wait_for_log(&server, "reconciliation put back").await;
    server.terminate().await;
}

/// Redis restarts (empty) under load: requests that need it answer 503 naming
/// it within about a second, and afterwards the same process serves fully and
/// delivers every acknowledged job, those pushed before the restart included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_under_load_recovers_without_delayq_restart() {
    let Some(mysql_url) = service("DELAYQ_TEST_MYSQL_URL") else { return };
    let name = unique_name("dq_e2e_redis_restart");
    let database_url = common::fresh_database(&mysql_url, &name, None).await;
    let Some(redis) = RedisProcess::start().await else { return };
    let port = redis.port();
    let redis_url = redis.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &node_env(&redis_url, &database_url, &name)).await;
    let client = server.client();
    let deliveries: Deliveries = Arc::default();
    let consumers = spawn_consumers(&client, "recovery.redis", 2, &deliveries);

    let stop = Arc::new(AtomicBool::new(false));
    let redis_down = Arc::new(AtomicBool::new(false));
    let slowest_refusal = Arc::new(AtomicU64::new(0));
    let pusher = {
        let (client, stop) = (client.clone(), Arc::clone(&stop));
        let (redis_down, slowest_refusal) = (Arc::clone(&redis_down), Arc::clone(&slowest_refusal));
        tokio::spawn(async move {
            let (mut acknowledged, mut refused) = (Vec::new(), 0u64);
            let mut index = 0u64;
            while !stop.load(Ordering::SeqCst) {
                index += 1;
                // Due after the restart for the early ones: they must survive it.
                let job =
                    json!({"topic": "recovery.redis", "body": format!("job {index}"), "delay": 4_000, "ttr": TTR_MS});
                let started = Instant::now();
                let (status, answer) = client.post("/push", &job).await.expect("the server answers");
                let took = started.elapsed().as_millis() as u64;
                match status {
                    200 => acknowledged.push(answer["data"]["id"].as_str().expect("id").to_owned()),
                    503 => {
                        let message = answer["message"].as_str().unwrap_or_default().to_ascii_lowercase();
                        assert!(message.contains("redis"), "the 503 names redis: {answer}");
                        if redis_down.load(Ordering::SeqCst) {
                            slowest_refusal.fetch_max(took, Ordering::SeqCst);
                        }
                        refused += 1;
                    }
                    other => panic!("push answered {other}: {answer}"),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (acknowledged, refused)
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis_down.store(true, Ordering::SeqCst);
    drop(redis);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, answer) = client.get("/pop?topic=recovery.redis").await.expect("pop while redis is down");
    assert_eq!(status, 503, "{answer}");
    let (status, ready) = client.get("/ready").await.expect("ready while redis is down");
    assert_eq!(status, 503, "{ready}");
    let _redis = RedisProcess::start_on(port).await.expect("restart redis-server");
    redis_down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let (acknowledged, refused) = pusher.await.expect("pusher");
    let slowest = slowest_refusal.load(Ordering::SeqCst);
    println!("{} pushes acknowledged, {refused} refused, slowest refusal {slowest} ms", acknowledged.len());
    assert!(refused > 0, "pushes were refused while redis was down");
    assert!(slowest <= 1_500, "a push took {slowest} ms to fail while redis was down");

    wait_for_deliveries(&deliveries, &acknowledged, Duration::from_secs(60), &server).await;
    for consumer in consumers {
        consumer.abort();
    }
    let (status, ready) = client.get("/ready").await.expect("ready");
    assert_eq!(status, 200, "{ready}");
    assert!(counter(&client, "delayq_scheduler_data_losses_total").await >= 1.0, "the empty restart is counted");
    assert!(server.terminate().await, "the same process served throughout");
}
