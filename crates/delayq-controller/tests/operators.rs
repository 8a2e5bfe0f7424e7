//! What an operator does to jobs and topics: run a delayed job now, retry a
//! dead job, retry every dead job of a topic (each refuses a job in another
//! state with 409 naming it, and an unknown id with 404), pause and resume a
//! topic.

#![allow(clippy::unwrap_used)]

mod common;

use axum::http::StatusCode;
use common::TestApp;
use serde_json::json;

/// Pushes a job with no retries, pops it and nacks it: it is dead.
async fn dead_job(app: &TestApp, topic: &str, biz_key: &str) -> String {
    let id = app.push(json!({"topic": topic, "body": "b", "maxRetries": 0, "bizKey": biz_key})).await;
    assert_eq!(app.pop(topic, 1, 2000).await.len(), 1);
    let nacked = app.post(&format!("/nack?jobId={id}"), None).await;
    assert_eq!(nacked.status, StatusCode::OK);
    assert_eq!(app.get(&format!("/jobs/{id}")).await.data()["state"], "dead");
    id
}

#[tokio::test]
async fn run_makes_a_delayed_job_due_now_and_keeps_the_rest() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "run", "body": "keep me", "delay": 3_600_000, "priority": 3})).await;
    let before = common::now_ms();
    let ran = app.post(&format!("/jobs/{id}/run"), None).await;
    assert_eq!(ran.status, StatusCode::OK);
    assert_eq!(ran.data()["id"], id.as_str());
    let run_at = ran.data()["runAt"].as_u64().unwrap();
    assert!(run_at >= before && run_at <= common::now_ms(), "due now: {run_at}");
    let popped = app.pop("run", 1, 2000).await;
    assert_eq!(popped.len(), 1, "it fell due");
    assert_eq!((popped[0]["body"].as_str(), popped[0]["priority"].as_u64()), (Some("keep me"), Some(3)));

    app.post(&format!("/jobs/{id}/run"), None).await.assert_error(StatusCode::CONFLICT, "reserved");
    app.post("/jobs/nobody/run", None).await.assert_error(StatusCode::NOT_FOUND, "nobody");
    app.post("/jobs/no%20space/run", None).await.assert_error(StatusCode::BAD_REQUEST, "id");
}

#[tokio::test]
async fn retry_brings_a_dead_job_back_with_its_attempts_reset_and_its_history() {
    let app = TestApp::new().await;
    let id = dead_job(&app, "retry", "order-1").await;
    let retried = app.post(&format!("/jobs/{id}/retry"), None).await;
    assert_eq!(retried.status, StatusCode::OK);
    let popped = app.pop("retry", 1, 2000).await;
    assert_eq!(popped.len(), 1);
    assert_eq!((popped[0]["id"].as_str(), popped[0]["attempt"].as_u64()), (Some(id.as_str()), Some(1)));
    assert_eq!(popped[0]["bizKey"], "order-1");
    let history = app.get(&format!("/jobs/{id}")).await.data()["history"].clone();
    let states: Vec<&str> = history.as_array().unwrap().iter().filter_map(|line| line["state"].as_str()).collect();
    let dead_at = states.iter().position(|state| *state == "dead");
    assert!(dead_at.is_some_and(|at| states[at + 1..].contains(&"ready")), "dead, then ready again: {states:?}");

    app.post(&format!("/jobs/{id}/retry"), None).await.assert_error(StatusCode::CONFLICT, "reserved");
    app.post("/jobs/ghost/retry", None).await.assert_error(StatusCode::NOT_FOUND, "ghost");
}

#[tokio::test]
async fn retrying_a_topics_dead_jobs_leaves_one_whose_business_key_was_taken() {
    let app = TestApp::new().await;
    let first = dead_job(&app, "dead", "a").await;
    let second = dead_job(&app, "dead", "b").await;
    // A new live job took the business key of the second.
    app.push(json!({"topic": "dead", "body": "new", "bizKey": "b", "delay": 3_600_000})).await;
    app.push(json!({"topic": "other", "body": "b", "maxRetries": 0})).await;

    let reply = app.post("/topics/dead/dead/retry", None).await;
    assert_eq!((reply.status, reply.data()), (StatusCode::OK, &json!({"retried": 1})));
    assert_eq!(app.get(&format!("/jobs/{first}")).await.data()["state"], "ready");
    assert_eq!(app.get(&format!("/jobs/{second}")).await.data()["state"], "dead");
    let again = app.post("/topics/dead/dead/retry", None).await;
    assert_eq!(again.data(), &json!({"retried": 0}));
    app.post("/topics/bad%20topic/dead/retry", None).await.assert_error(StatusCode::BAD_REQUEST, "topic");
}

#[tokio::test]
async fn a_paused_topic_hands_out_nothing_until_it_is_resumed() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "paused", "body": "b"})).await;
    app.push(json!({"topic": "running", "body": "b"})).await;
    let paused = app.post("/topics/paused/pause", None).await;
    assert_eq!((paused.status, paused.data()), (StatusCode::OK, &json!({"topic": "paused", "paused": true})));
    assert_eq!(app.post("/topics/paused/pause", None).await.status, StatusCode::OK, "pausing twice is fine");
    assert!(app.pop("paused", 1, 0).await.is_empty(), "a paused topic hands out nothing");
    let started = std::time::Instant::now();
    assert!(app.pop("paused", 1, 600).await.is_empty());
    assert!(started.elapsed() >= std::time::Duration::from_millis(500), "a long poll waits out its timeout");
    assert_eq!(app.pop("running", 1, 2000).await.len(), 1, "other topics run");
    assert_eq!(app.get("/stats").await.data()["paused"], json!(["paused"]));
    assert_eq!(app.get(&format!("/jobs/{id}")).await.data()["state"], "ready", "it still fell due");

    // A pop waiting on the paused topic gets the job once the topic is resumed.
    let (popped, resumed) = tokio::join!(app.pop("paused", 1, 5000), async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        app.post("/topics/paused/resume", None).await
    });
    assert_eq!(resumed.data(), &json!({"topic": "paused", "paused": false}));
    assert_eq!(popped.len(), 1, "handed out after the resume");
    assert_eq!(app.get("/stats").await.data()["paused"], json!([]));
    app.post("/topics/no%20space/pause", None).await.assert_error(StatusCode::BAD_REQUEST, "topic");
}

#[tokio::test]
async fn deleting_a_topics_dead_jobs_leaves_its_other_jobs_and_other_topics() {
    let app = TestApp::new().await;
    let first = dead_job(&app, "graveyard", "a").await;
    let second = dead_job(&app, "graveyard", "b").await;
    let elsewhere = dead_job(&app, "elsewhere", "c").await;
    let waiting = app.push(json!({"topic": "graveyard", "body": "b", "delay": 3_600_000})).await;

    let reply = app.post("/topics/graveyard/dead/delete", None).await;
    assert_eq!((reply.status, reply.data()), (StatusCode::OK, &json!({"deleted": 2})));
    for id in [&first, &second] {
        app.get(&format!("/jobs/{id}")).await.assert_error(StatusCode::NOT_FOUND, id);
    }
    assert_eq!(app.get(&format!("/jobs/{elsewhere}")).await.data()["state"], "dead");
    assert_eq!(app.get(&format!("/jobs/{waiting}")).await.data()["state"], "delay");
    assert_eq!(app.get("/stats").await.data()["topics"]["graveyard"]["dead"], 0);
    assert_eq!(app.post("/topics/graveyard/dead/delete", None).await.data(), &json!({"deleted": 0}));
}
