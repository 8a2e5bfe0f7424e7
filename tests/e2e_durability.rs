//! `kill -9` under load, then a restart on the same data directory: every
//! acknowledged job is still delivered.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{now_ms, Client, Server};
use delayq_testkit::eventually;
use serde_json::json;

const PRODUCERS: usize = 8;
const CONSUMERS: usize = 4;
const TOPIC: &str = "durability";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_acknowledged_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Server::start(dir.path(), &[]).await;
    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    let delivered = Arc::new(Mutex::new(HashSet::new()));

    let mut load = Vec::new();
    for producer in 0..PRODUCERS {
        load.push(tokio::spawn(produce(first.client(), producer, Arc::clone(&acknowledged))));
    }
    for _ in 0..CONSUMERS {
        load.push(tokio::spawn(consume(first.client(), Arc::clone(&delivered), now_ms() + 60_000)));
    }
    // Let the load build up, then crash the server in the middle of it.
    let started = now_ms();
    while acknowledged.lock().expect("lock").len() < 1_500 && now_ms() < started + 30_000 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill9().await;
    for task in load {
        let _ = task.await;
    }
    let acknowledged_before_crash = acknowledged.lock().expect("lock").clone();
    let delivered_before_crash = delivered.lock().expect("lock").len();
    assert!(acknowledged_before_crash.len() >= 1_500, "the load ran: {}", acknowledged_before_crash.len());

    let second = Server::start(dir.path(), &[]).await;
    let deadline = now_ms() + 60_000;
    let consumers: Vec<_> =
        (0..CONSUMERS).map(|_| tokio::spawn(consume(second.client(), Arc::clone(&delivered), deadline))).collect();
    // Whether all arrived in time, the list of missing jobs below tells.
    eventually(Duration::from_millis(deadline.saturating_sub(now_ms())), || async {
        acknowledged_before_crash.difference(&delivered.lock().expect("lock")).next().is_none()
    })
    .await;
    for consumer in &consumers {
        consumer.abort();
    }
    let delivered = delivered.lock().expect("lock").clone();
    let missing: Vec<_> = acknowledged_before_crash.difference(&delivered).take(10).collect();
    println!(
        "acknowledged {} before kill -9, delivered {} before and {} in all",
        acknowledged_before_crash.len(),
        delivered_before_crash,
        delivered.len()
    );
    assert!(missing.is_empty(), "acknowledged jobs never delivered (first 10): {missing:?}; log: {}", second.log());
}

/// Pushes jobs due within 0–1.5 s until the server goes away.
async fn produce(client: Client, producer: usize, acknowledged: Arc<Mutex<HashSet<String>>>) {
    for sequence in 0.. {
        let id = format!("p{producer}-{sequence}");
        let delay = (sequence * 37 + producer * 11) % 1_500;
        let job = json!({"topic": TOPIC, "id": id, "body": "payload", "delay": delay, "ttr": 2_000});
        match client.post("/push", &job).await {
            Ok((200, _)) => {
                acknowledged.lock().expect("lock").insert(id);
            }
            Ok((status, body)) => panic!("push refused with {status}: {body}"),
            Err(_) => return, // the server is gone
        }
    }
}

/// Long-polls, records and finishes jobs until `deadline` or until the server goes away.
async fn consume(client: Client, delivered: Arc<Mutex<HashSet<String>>>, deadline: u64) {
    while now_ms() < deadline {
        let Ok((200, popped)) = client.get(&format!("/pop?topic={TOPIC}&count=50&timeout=500")).await else {
            return;
        };
        for job in popped["data"].as_array().into_iter().flatten() {
            let Some(id) = job["id"].as_str() else { continue };
            delivered.lock().expect("lock").insert(id.to_owned());
            if client.post_empty(&format!("/finish?jobId={id}")).await.is_err() {
                return;
            }
        }
    }
}
