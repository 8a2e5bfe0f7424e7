//! Per-route body limits and the request timeout: a body larger than its
//! route can use is refused before it is read or parsed, a finish result is
//! bounded, and no request but a long poll outlives the request timeout.

#![allow(clippy::unwrap_used)]

mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, Method, Request, StatusCode};
use common::TestApp;
use delayq_common::Limits;
use delayq_queue::QueueSettings;
use hyper::body::Frame;
use serde_json::{json, Value};

/// A request body that never arrives.
struct StalledBody;

impl hyper::body::Body for StalledBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Pending
    }
}

/// A request whose body never arrives, optionally announcing a length.
fn stalled_request(uri: &str, content_length: Option<u64>) -> Request<Body> {
    let mut request = Request::builder().method(Method::POST).uri(uri).header(header::CONTENT_TYPE, "application/json");
    if let Some(length) = content_length {
        request = request.header(header::CONTENT_LENGTH, length);
    }
    request.body(Body::new(StalledBody)).unwrap()
}

#[tokio::test]
async fn a_finish_result_over_the_limit_is_413_naming_result_and_changes_nothing() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "t", "body": "b"})).await;
    assert_eq!(app.pop("t", 1, 0).await.len(), 1);
    let too_long = json!({"result": "r".repeat(65_537)});
    let reply = app.post(&format!("/finish?jobId={id}"), Some(&too_long)).await;
    reply.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "result must be at most 65536 bytes");
    let youzan = app.send(Method::PUT, &format!("/topic/t/job/{id}"), Some(&too_long), None).await;
    youzan.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "result must be at most 65536 bytes");
    let state = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(state.data()["state"], "reserved", "a refused finish changes nothing");
    let fits = app.post(&format!("/finish?jobId={id}"), Some(&json!({"result": "r".repeat(65_536)}))).await;
    assert_eq!(fits.status, StatusCode::OK, "{}", fits.body);
}

#[tokio::test]
async fn the_result_limit_follows_the_configuration() {
    let app = TestApp::with_config(|config| config.max_result_bytes = 10).await;
    let id = app.push(json!({"topic": "t", "body": "b"})).await;
    assert_eq!(app.pop("t", 1, 0).await.len(), 1);
    let reply = app.post(&format!("/finish?jobId={id}"), Some(&json!({"result": "12345678901"}))).await;
    reply.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "result must be at most 10 bytes");
    // Far more than a 10-byte result can take as JSON: refused unread.
    let padded = json!({"result": "ok", "pad": "p".repeat(4096)});
    let reply = app.post(&format!("/finish?jobId={id}"), Some(&padded)).await;
    reply.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "request body must be at most");
}

#[tokio::test]
async fn a_push_larger_than_any_job_can_be_is_refused_before_parsing() {
    let app = TestApp::new().await;
    // A fully escaped 64 KiB body still fits.
    let escaped = json!({"topic": "t", "body": "\u{1}".repeat(65_536)});
    assert!(escaped.to_string().len() > 6 * 65_536);
    let fits = app.post("/push", Some(&escaped)).await;
    assert_eq!(fits.status, StatusCode::OK, "{}", fits.body);
    // A 1 MiB push of unknown fields is no job: refused as a whole.
    let padded = json!({"topic": "t", "body": "b", "pad": "p".repeat(1 << 20)});
    let reply = app.post("/push", Some(&padded)).await;
    reply.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "request body must be at most");
    let youzan = app.post("/topic/t/job", Some(&padded)).await;
    youzan.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "request body must be at most");
    assert_eq!(app.pop("t", 100, 0).await.len(), 1, "only the job that fit was pushed");
}

#[tokio::test]
async fn a_batch_larger_than_a_thousand_jobs_can_be_is_refused_before_parsing() {
    let settings =
        QueueSettings { limits: Limits { max_body_bytes: 100, ..Limits::default() }, ..QueueSettings::default() };
    let app = TestApp::build_with_settings(settings, |_| {}, |state| state).await;
    // 900 entries of 10 KB: each within a full batch's share, but together
    // more than a thousand 100-byte jobs can take.
    let entries: Vec<Value> =
        (0..900).map(|n| json!({"topic": "t", "body": format!("{n}"), "pad": "p".repeat(10_000)})).collect();
    let reply = app.post("/push/batch", Some(&json!({"jobs": entries}))).await;
    reply.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "request body must be at most");
    assert!(app.pop("t", 100, 0).await.is_empty(), "nothing of a refused batch is pushed");
    // A full batch of the largest jobs, every body byte escaped, fits.
    let full: Vec<Value> = (0..1000).map(|_| json!({"topic": "t", "body": "\u{1}".repeat(100)})).collect();
    let reply = app.post("/push/batch", Some(&json!({"jobs": full}))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.message());
}

#[tokio::test]
async fn a_batch_of_too_many_entries_is_refused_naming_jobs() {
    let app = TestApp::new().await;
    let body = format!(r#"{{"jobs": [{}]}}"#, vec!["{}"; 200_000].join(","));
    let reply = app.send_raw(Method::POST, "/push/batch", Some(body.into_bytes()), None).await;
    reply.assert_error(StatusCode::BAD_REQUEST, "jobs must have at most 1000 entries");
}

#[tokio::test]
async fn an_announced_body_over_the_limit_is_refused_without_waiting_for_it() {
    let app = TestApp::new().await;
    for uri in ["/push", "/push/batch", "/finish?jobId=x", "/topic/t/job"] {
        let request = stalled_request(uri, Some(1 << 40));
        let answer = tokio::time::timeout(Duration::from_secs(2), app.exchange_request(request)).await;
        let (status, body) = answer.unwrap_or_else(|_| panic!("{uri}: waited for a body it must refuse"));
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{uri}: {}", String::from_utf8_lossy(&body));
        let envelope: Value = serde_json::from_slice(&body).unwrap();
        assert!(envelope["message"].as_str().unwrap().starts_with("request body must be at most"), "{envelope}");
    }
}

#[tokio::test]
async fn a_request_that_outlives_the_timeout_is_503() {
    let app = TestApp::with_config(|config| config.request_timeout = Duration::from_millis(300)).await;
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), app.exchange_request(stalled_request("/push", None)));
    let (status, body) = answer.await.expect("the request timeout ends a stalled request");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let envelope: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(envelope["message"], "request did not complete within 300 ms");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn long_polls_wait_past_the_request_timeout() {
    let app = TestApp::with_config(|config| config.request_timeout = Duration::from_millis(200)).await;
    let started = Instant::now();
    assert!(app.pop("idle", 1, 800).await.is_empty());
    let youzan = app.get("/topic/idle/job?timeout=1").await;
    assert_eq!((youzan.status, youzan.data()), (StatusCode::OK, &Value::Null));
    assert!(started.elapsed() >= Duration::from_millis(1_800), "both polls waited their own timeout");
}
