//! The registry of consumers over REST: a pop names its consumer (`consumer=`
//! or the `delayq-consumer` header), a heartbeat keeps it listed, `/stats`
//! lists it with the jobs it holds, `/metrics` counts them, and bad names are
//! refused naming the field.

#![allow(clippy::unwrap_used)]

mod common;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use common::TestApp;
use serde_json::{json, Value};

/// The consumers `/stats` lists.
async fn listed(app: &TestApp) -> Vec<Value> {
    let reply = app.get("/stats").await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.data()["consumers"].as_array().cloned().unwrap()
}

#[tokio::test]
async fn a_pop_lists_its_consumer_with_the_jobs_it_holds_until_they_are_acked() {
    let app = TestApp::new().await;
    assert!(listed(&app).await.is_empty(), "nobody popped yet");
    let first = app.push(json!({"topic": "orders", "body": "a"})).await;
    app.push(json!({"topic": "orders", "body": "b"})).await;
    let before = common::now_ms();
    let popped = app.get("/pop?topic=orders&count=2&timeout=2000&consumer=worker-1").await;
    assert_eq!(popped.data().as_array().map(Vec::len), Some(2));

    let consumers = listed(&app).await;
    assert_eq!(consumers.len(), 1, "{consumers:?}");
    let worker = &consumers[0];
    assert_eq!((worker["consumer"].as_str(), worker["topic"].as_str()), (Some("worker-1"), Some("orders")));
    assert_eq!(worker["inFlight"], 2);
    assert!(worker.get("group").is_none(), "no group: {worker}");
    assert!(worker["lastSeen"].as_u64().unwrap() >= before);
    assert!(!worker["node"].as_str().unwrap().is_empty());

    assert_eq!(app.post(&format!("/finish?jobId={first}"), None).await.status, StatusCode::OK);
    assert_eq!(listed(&app).await[0]["inFlight"], 1, "a finished job leaves the count");
}

#[tokio::test]
async fn the_header_names_a_consumer_and_a_heartbeat_keeps_another_listed() {
    let app = TestApp::new().await;
    let request = Request::builder()
        .method(Method::GET)
        .uri("/pop?topic=mail")
        .header("delayq-consumer", "header-worker")
        .body(Body::empty())
        .unwrap();
    let (status, _) = app.exchange_request(request).await;
    assert_eq!(status, StatusCode::OK);

    let beat = app.post("/consumers/heartbeat?consumer=idle-worker&topic=mail&group=billing", None).await;
    assert_eq!(beat.status, StatusCode::OK);
    assert_eq!(beat.data()["forgetAfterMs"], 60_000);
    assert_eq!(beat.data()["group"], "billing");

    let names: Vec<(String, Option<String>)> = listed(&app)
        .await
        .iter()
        .map(|consumer| {
            (consumer["consumer"].as_str().unwrap().to_owned(), consumer["group"].as_str().map(str::to_owned))
        })
        .collect();
    assert_eq!(
        names,
        [("header-worker".to_owned(), None), ("idle-worker".to_owned(), Some("billing".to_owned()))],
        "sorted by topic, then group (none first), then name"
    );
}

#[tokio::test]
async fn bad_names_are_refused_naming_the_field_and_register_nothing() {
    let app = TestApp::new().await;
    app.get("/pop?topic=t&consumer=has%20space").await.assert_error(StatusCode::BAD_REQUEST, "consumer");
    let long = "c".repeat(129);
    app.post(&format!("/consumers/heartbeat?consumer={long}&topic=t"), None)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "consumer must be at most 128 characters");
    app.post("/consumers/heartbeat?topic=t", None).await.assert_error(StatusCode::BAD_REQUEST, "consumer is required");
    app.post("/consumers/heartbeat?consumer=w", None).await.assert_error(StatusCode::BAD_REQUEST, "topic is required");
    app.post("/consumers/heartbeat?consumer=w&topic=t&group=a/b", None)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "group may only contain");
    let request = Request::builder()
        .method(Method::GET)
        .uri("/pop?topic=t")
        .header("delayq-consumer", "not ok")
        .body(Body::empty())
        .unwrap();
    let (status, body) = app.exchange_request(request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{}", String::from_utf8_lossy(&body));
    assert!(listed(&app).await.is_empty(), "nothing was registered");
}

#[tokio::test]
async fn metrics_count_the_consumers_and_their_jobs() {
    let app = TestApp::new().await;
    app.push(json!({"topic": "m", "body": "a"})).await;
    app.get("/pop?topic=m&timeout=2000&consumer=metrics-worker").await;
    let (status, body) = app.exchange(Method::GET, "/metrics", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(body).unwrap();
    let value =
        |name: &str| text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok());
    assert!(value("delayq_consumers").is_some_and(|count| count >= 1.0), "{text}");
    assert!(value("delayq_consumer_jobs_in_flight").is_some_and(|count| count >= 1.0), "{text}");
}
