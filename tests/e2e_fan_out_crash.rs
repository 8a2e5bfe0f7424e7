//! A power loss in the middle of a fan-out on Redis + MariaDB: the process is
//! killed (`kill -9`) and Redis loses everything (FLUSHALL) while the jobs of
//! a topic with consumer groups are handed to their groups. The rows of the
//! deliveries are journaled, so some die with the process; after a restart
//! every group still gets every acknowledged job, and no group gets again a
//! delivery whose ack it had been answered.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{unique_name, Client, Server};
use delayq_testkit::{eventually, service, RedisProcess};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

const JOBS: usize = 3_000;
const TOPIC: &str = "crash.fan";
const GROUPS: [&str; 2] = ["billing", "audit"];
const CONSUMERS_PER_GROUP: usize = 2;

/// Deliveries seen, per (group, job id), and the ones whose ack was answered 200.
#[derive(Default)]
struct Seen {
    delivered: HashMap<(String, String), u32>,
    acked: HashSet<(String, String)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_loss_during_fan_out_loses_no_delivery_and_repeats_no_acked_one() {
    let Some(mysql_url) = service("DELAYQ_TEST_MYSQL_URL") else { return };
    let name = unique_name("dq_e2e_fan_out_crash");
    let database_url = common::fresh_database(&mysql_url, &name, None).await;
    let Some(redis) = RedisProcess::start().await else { return };
    let redis_url = redis.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let env = common::distributed_env(&redis_url, &database_url, &name, "crash");
    let first = Server::start(dir.path(), &env).await;
    let client = first.client();
    for group in GROUPS {
        let (status, answer) = client.put_empty(&format!("/topics/{TOPIC}/groups/{group}")).await.expect("declare");
        assert_eq!(status, 200, "{answer}");
    }
    // Each node reads the declarations at most a second old.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let mut pushed = Vec::with_capacity(JOBS);
    for batch in (0..JOBS).collect::<Vec<_>>().chunks(1_000) {
        let jobs: Vec<Value> = batch
            .iter()
            .map(|index| json!({"topic": TOPIC, "body": format!("job {index}"), "delay": 500 + (index * 7919) % 3_000, "ttr": 5_000}))
            .collect();
        let (status, answer) = client.post("/push/batch", &json!({ "jobs": jobs })).await.expect("push batch");
        assert_eq!(status, 200, "{answer}");
        for item in answer["data"].as_array().expect("array") {
            pushed.push(item["id"].as_str().unwrap_or_else(|| panic!("refused: {item}")).to_owned());
        }
    }
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let consumers = spawn_consumers(&client, &seen);
    let acked_enough = eventually(Duration::from_secs(30), || async {
        seen.lock().expect("lock").acked.len() >= JOBS * GROUPS.len() / 3
    })
    .await;
    assert!(acked_enough, "the deliveries did not start; log: {}", first.log());
    first.kill9().await;
    redis.cli(&["flushall"]);
    for consumer in consumers {
        consumer.abort();
    }
    let acked_before: HashSet<(String, String)> = seen.lock().expect("lock").acked.clone();
    let delivered_before: HashMap<(String, String), u32> = seen.lock().expect("lock").delivered.clone();

    let second = Server::start(dir.path(), &env).await;
    let consumers = spawn_consumers(&second.client(), &seen);
    let expected: Vec<(String, String)> =
        pushed.iter().flat_map(|id| GROUPS.iter().map(move |group| ((*group).to_owned(), id.clone()))).collect();
    eventually(Duration::from_secs(90), || async {
        let seen = seen.lock().expect("lock");
        expected.iter().all(|delivery| seen.delivered.contains_key(delivery))
    })
    .await;
    // Give a repeated delivery the chance to show up.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for consumer in consumers {
        consumer.abort();
    }
    let delivered = seen.lock().expect("lock").delivered.clone();
    let missing: Vec<_> = expected.iter().filter(|delivery| !delivered.contains_key(*delivery)).take(5).collect();
    assert!(missing.is_empty(), "deliveries never made (first 5): {missing:?}; log: {}", second.log());
    let repeated: Vec<_> = acked_before
        .iter()
        .filter(|delivery| delivered.get(*delivery) > delivered_before.get(*delivery))
        .take(5)
        .collect();
    println!(
        "{} of {} deliveries acked before the power loss, {} delivered again after it",
        acked_before.len(),
        expected.len(),
        delivered
            .iter()
            .filter(|(delivery, count)| delivered_before.get(*delivery).is_some_and(|before| *count > before))
            .count()
    );
    assert!(repeated.is_empty(), "acked deliveries handed out again (first 5): {repeated:?}");
    second.terminate().await;
}

/// Starts [`CONSUMERS_PER_GROUP`] consumers per group that pop, note and ack
/// deliveries until aborted.
fn spawn_consumers(client: &Client, seen: &Arc<Mutex<Seen>>) -> Vec<JoinHandle<()>> {
    GROUPS
        .iter()
        .flat_map(|group| (0..CONSUMERS_PER_GROUP).map(move |_| *group))
        .map(|group| tokio::spawn(consume(client.clone(), group, Arc::clone(seen))))
        .collect()
}

async fn consume(client: Client, group: &'static str, seen: Arc<Mutex<Seen>>) {
    let pop = format!("/pop?topic={TOPIC}&group={group}&count=20&timeout=500");
    loop {
        let Ok((200, popped)) = client.get(&pop).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        for job in popped["data"].as_array().into_iter().flatten() {
            let Some(id) = job["id"].as_str() else { continue };
            let delivery = (group.to_owned(), id.to_owned());
            *seen.lock().expect("lock").delivered.entry(delivery.clone()).or_default() += 1;
            if let Ok((200, _)) = client.post_empty(&format!("/finish?jobId={id}&group={group}")).await {
                seen.lock().expect("lock").acked.insert(delivery);
            }
        }
    }
}
