//! The Youzan-style `topic/{topic}/job` aliases, with durations in seconds.

#![allow(clippy::unwrap_used)]

mod common;

use axum::http::{Method, StatusCode};
use common::{now_ms, TestApp};
use serde_json::{json, Value};

#[tokio::test]
async fn push_takes_the_topic_from_the_path_and_seconds_for_delay_and_ttr() {
    let app = TestApp::new().await;
    let before = now_ms();
    let body = json!({"id": "y1", "body": "b", "delay": 1, "ttr": 5});
    let reply = app.send(Method::POST, "/topic/yz/job", Some(&body), None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.data()["id"], "y1");
    let run_at = reply.data()["runAt"].as_u64().unwrap();
    assert!(run_at >= before + 1000 && run_at <= now_ms() + 1000, "delay 1 means one second");

    let none = app.get("/topic/yz/job").await;
    assert_eq!((none.status, none.data()), (StatusCode::OK, &Value::Null));
    let job = app.get("/topic/yz/job?timeout=5").await;
    assert_eq!(job.data()["id"], "y1", "{}", job.body);
    assert_eq!(job.data()["ttr"], 5000, "ttr is shown in milliseconds");
    assert_eq!(job.data()["topic"], "yz");
}

#[tokio::test]
async fn push_refuses_a_mismatched_topic_and_validates_in_seconds() {
    let app = TestApp::new().await;
    let other = json!({"topic": "other", "body": "b"});
    let reply = app.send(Method::POST, "/topic/yz/job", Some(&other), None).await;
    reply.assert_error(StatusCode::BAD_REQUEST, "topic must match");
    let same = json!({"topic": "yz", "body": "b"});
    assert_eq!(app.send(Method::POST, "/topic/yz/job", Some(&same), None).await.status, StatusCode::OK);
    let zero_ttr = json!({"body": "b", "ttr": 0});
    let reply = app.send(Method::POST, "/topic/yz/job", Some(&zero_ttr), None).await;
    reply.assert_error(StatusCode::BAD_REQUEST, "ttr must be from 1 s to 86400 s");
    let reply = app.send(Method::POST, "/topic/a%20b/job", Some(&json!({"body": "b"})), None).await;
    reply.assert_error(StatusCode::BAD_REQUEST, "topic may only contain");
    app.get("/topic/yz/job?timeout=31").await.assert_error(StatusCode::BAD_REQUEST, "timeout must be from 0 to 30");
}

#[tokio::test]
async fn put_finishes_and_delete_cancels_within_the_topic() {
    let app = TestApp::new().await;
    let push = |id: &str| json!({"id": id, "body": "b"});
    app.send(Method::POST, "/topic/yz/job", Some(&push("f1")), None).await;
    app.send(Method::POST, "/topic/yz/job", Some(&push("d1")), None).await;

    let early = app.send(Method::PUT, "/topic/yz/job/f1", None, None).await;
    early.assert_error(StatusCode::CONFLICT, "not reserved");
    let popped = app.get("/topic/yz/job?timeout=2").await;
    let popped_id = popped.data()["id"].as_str().unwrap().to_owned();
    let finished = app.send(Method::PUT, &format!("/topic/yz/job/{popped_id}"), None, None).await;
    assert_eq!((finished.status, finished.data()), (StatusCode::OK, &json!({"id": popped_id})));

    let remaining = if popped_id == "f1" { "d1" } else { "f1" };
    let wrong_topic = app.send(Method::DELETE, &format!("/topic/other/job/{remaining}"), None, None).await;
    wrong_topic.assert_error(StatusCode::NOT_FOUND, remaining);
    let deleted = app.send(Method::DELETE, &format!("/topic/yz/job/{remaining}"), None, None).await;
    assert_eq!((deleted.status, deleted.data()), (StatusCode::OK, &json!({"id": remaining})));
    let again = app.send(Method::DELETE, &format!("/topic/yz/job/{remaining}"), None, None).await;
    again.assert_error(StatusCode::CONFLICT, &format!("job {remaining} is deleted"));
    let unknown = app.send(Method::PUT, "/topic/yz/job/ghost", None, None).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}
