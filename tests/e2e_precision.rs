//! Firing precision on an idle server: a long-polling consumer gets each job
//! no earlier than its runAt and shortly after it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{now_ms, Client, Server};
use delayq_testkit::eventually;
use serde_json::json;

const JOBS: u64 = 200;
const CONSUMERS: usize = 4;
/// A correctness bound, far above the target, so a loaded machine never flakes.
const LATENESS_BOUND_MS: i64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_fire_on_time_for_waiting_consumers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    let lateness = Arc::new(Mutex::new(Vec::new()));
    let consumers: Vec<_> =
        (0..CONSUMERS).map(|_| tokio::spawn(consume(server.client(), Arc::clone(&lateness)))).collect();

    let client = server.client();
    let first_due = now_ms() + 1_500;
    for index in 0..JOBS {
        let run_at = first_due + index * 10;
        let job = json!({"topic": "precision", "body": "b", "runAt": run_at});
        let (status, body) = client.post("/push", &job).await.expect("push");
        assert_eq!(status, 200, "{body}");
    }
    let deadline = first_due + JOBS * 10 + 10_000;
    // Whether all arrived in time, the count below tells.
    let until_deadline = Duration::from_millis(deadline.saturating_sub(now_ms()));
    eventually(until_deadline, || async { lateness.lock().expect("lock").len() >= JOBS as usize }).await;
    for consumer in consumers {
        consumer.abort();
    }
    let mut lateness = lateness.lock().expect("lock").clone();
    lateness.sort_unstable();
    assert_eq!(lateness.len(), JOBS as usize, "every job arrived");
    let percentile = |p: usize| lateness[(p * lateness.len()).div_ceil(100) - 1];
    println!(
        "lateness ms over {} jobs: min {} p50 {} p99 {} max {}",
        lateness.len(),
        lateness[0],
        percentile(50),
        percentile(99),
        lateness[lateness.len() - 1]
    );
    assert!(lateness[0] >= 0, "a job was delivered before its runAt: {} ms early", -lateness[0]);
    assert!(lateness[lateness.len() - 1] <= LATENESS_BOUND_MS, "max lateness {:?}", lateness.last());
}

async fn consume(client: Client, lateness: Arc<Mutex<Vec<i64>>>) {
    loop {
        let Ok((200, popped)) = client.get("/pop?topic=precision&count=100&timeout=5000").await else {
            return;
        };
        let received_at = now_ms() as i64;
        for job in popped["data"].as_array().into_iter().flatten() {
            let run_at = job["runAt"].as_i64().expect("runAt");
            lateness.lock().expect("lock").push(received_at - run_at);
            let id = job["id"].as_str().expect("id");
            let _ = client.post_empty(&format!("/finish?jobId={id}")).await;
        }
    }
}
