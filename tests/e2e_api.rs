//! The HTTP API of a real `delayq serve` process, end to end.

mod common;

use std::time::Duration;

use common::{now_ms, Server};
use serde_json::json;

#[tokio::test]
async fn push_pop_finish_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();

    let (status, health) = client.get("/health").await.expect("health");
    assert_eq!(status, 200, "{health}");
    let (status, ready) = client.get("/ready").await.expect("ready");
    assert_eq!(status, 200, "{ready}");

    let (status, pushed) = client
        .post("/push", &json!({"topic": "e2e.orders", "body": "close order 1", "delay": 200}))
        .await
        .expect("push");
    assert_eq!(status, 200, "{pushed}");
    assert_eq!(pushed["success"], true);
    let id = pushed["data"]["id"].as_str().expect("generated id").to_owned();
    assert!(id.parse::<u64>().is_ok(), "a generated id is a decimal snowflake: {id}");
    let run_at = pushed["data"]["runAt"].as_u64().expect("runAt");

    let (status, popped) = client.get("/pop?topic=e2e.orders&timeout=5000").await.expect("pop");
    let popped_at = now_ms();
    assert_eq!(status, 200, "{popped}");
    let jobs = popped["data"].as_array().expect("array");
    assert_eq!(jobs.len(), 1, "{popped}");
    assert_eq!(jobs[0]["id"], id.as_str());
    assert_eq!(jobs[0]["body"], "close order 1");
    assert_eq!(jobs[0]["attempt"], 1);
    assert!(popped_at >= run_at, "popped {popped_at} before runAt {run_at}");

    let (status, finished) =
        client.post(&format!("/finish?jobId={id}"), &json!({"result": "closed"})).await.expect("finish");
    assert_eq!(status, 200, "{finished}");
    assert_eq!(finished["data"]["id"], id.as_str());

    let (status, job) = client.get(&format!("/jobs/{id}")).await.expect("get job");
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["data"]["state"], "finished");
    assert_eq!(job["data"]["result"], "closed");
    let history: Vec<&str> = job["data"]["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|entry| entry["state"].as_str().expect("state"))
        .collect();
    assert_eq!(history.first(), Some(&"delay"), "{history:?}");
    assert_eq!(history.last(), Some(&"finished"), "{history:?}");

    let (status, again) = client.post_empty(&format!("/finish?jobId={id}")).await.expect("finish again");
    assert_eq!(status, 409, "a finished job is a conflict naming its state: {again}");
    assert_eq!(again["message"], format!("job {id} is finished, not reserved"));
    assert_eq!(again["success"], false);

    let (status, metrics) = client.get_text("/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("delayq_pushes_total"), "{metrics}");
    assert!(server.terminate().await, "SIGTERM ends the server cleanly");
}

#[tokio::test]
async fn bad_requests_name_the_field_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();

    let (status, refused) = client.post("/push", &json!({"topic": "t", "body": "b", "delay": -5})).await.expect("push");
    assert_eq!(status, 400);
    assert_eq!(refused["success"], false);
    assert!(refused["message"].as_str().expect("message").contains("delay"), "{refused}");

    let (status, refused) = client.post("/push", &json!({"body": "b"})).await.expect("push");
    assert_eq!(status, 400);
    assert!(refused["message"].as_str().expect("message").contains("topic"), "{refused}");

    let (status, _) = client.post("/push", &json!({"topic": "t", "body": "x".repeat(70_000)})).await.expect("push");
    assert_eq!(status, 413);

    let (status, _) =
        client.post("/push", &json!({"topic": "t", "id": "dup", "body": "b", "delay": 60_000})).await.expect("push");
    assert_eq!(status, 200);
    let (status, conflict) =
        client.post("/push", &json!({"topic": "t", "id": "dup", "body": "b", "delay": 60_000})).await.expect("push");
    assert_eq!(status, 409, "{conflict}");

    let (status, missing) = client.get("/jobs/nope").await.expect("get");
    assert_eq!(status, 404, "{missing}");

    let (status, stats) = client.get("/stats").await.expect("stats");
    assert_eq!(status, 200, "{stats}");
    let (status, popped) = client.get("/pop?topic=t").await.expect("pop");
    assert_eq!(status, 200);
    assert_eq!(popped["data"], json!([]), "the refused pushes left nothing behind");
}

#[tokio::test]
async fn youzan_routes_take_seconds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();
    let before = now_ms();
    let (status, pushed) =
        client.post("/topic/yz/job", &json!({"body": "b", "delay": 1, "ttr": 5})).await.expect("push");
    assert_eq!(status, 200, "{pushed}");
    let run_at = pushed["data"]["runAt"].as_u64().expect("runAt");
    assert!(run_at >= before + 1_000 && run_at < before + 5_000, "delay is in seconds: {run_at} vs {before}");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (status, popped) = client.get("/topic/yz/job").await.expect("pop");
    assert_eq!(status, 200, "{popped}");
}
