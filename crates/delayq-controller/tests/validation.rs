//! Bad input of every kind: a 400 (or 413) naming the problem, in the envelope,
//! changing nothing; unknown routes and wrong methods keep the envelope too.

#![allow(clippy::unwrap_used)]

mod common;

use axum::http::{Method, StatusCode};
use common::TestApp;
use serde_json::json;

#[tokio::test]
async fn push_fields_are_validated_by_name() {
    let app = TestApp::new().await;
    let cases = [
        (json!({"body": "b"}), "topic is required"),
        (json!({"topic": "a b", "body": "b"}), "topic may only contain"),
        (json!({"topic": "t"}), "body is required"),
        (json!({"topic": "t", "body": "b", "delay": -1}), "delay must be >= 0"),
        (json!({"topic": "t", "body": "b", "delay": "soon"}), "delay must be an integer"),
        (json!({"topic": "t", "body": "b", "delay": 1, "runAt": 1}), "runAt must not be given together with delay"),
        (json!({"topic": "t", "body": "b", "ttr": 5}), "ttr must be from 100 ms"),
        (json!({"topic": "t", "body": "b", "priority": 9}), "priority must be from 0 to 4"),
        (json!({"topic": "t", "body": "b", "id": "x y"}), "id may only contain"),
        (json!({"topic": "t", "body": "b", "bizKey": ""}), "bizKey must be 1-128 characters"),
    ];
    for (job, message) in cases {
        app.post("/push", Some(&job)).await.assert_error(StatusCode::BAD_REQUEST, message);
    }
    assert!(app.pop("t", 100, 0).await.is_empty(), "refused pushes change nothing");
}

#[tokio::test]
async fn bodies_that_are_not_a_json_object_are_refused() {
    let app = TestApp::new().await;
    let not_json = app.send_raw(Method::POST, "/push", Some(b"{\"topic\": ".to_vec()), None).await;
    not_json.assert_error(StatusCode::BAD_REQUEST, "request body is not valid JSON");
    let array = app.send_raw(Method::POST, "/push", Some(b"[1, 2]".to_vec()), None).await;
    array.assert_error(StatusCode::BAD_REQUEST, "request body must be a JSON object");
    let empty = app.send_raw(Method::POST, "/push", None, None).await;
    empty.assert_error(StatusCode::BAD_REQUEST, "request body is required");
    let batch = app.send_raw(Method::POST, "/push/batch", Some(b"nope".to_vec()), None).await;
    batch.assert_error(StatusCode::BAD_REQUEST, "not valid JSON");
    let finish = app.send_raw(Method::POST, "/finish?jobId=x", Some(b"\"done\"".to_vec()), None).await;
    finish.assert_error(StatusCode::BAD_REQUEST, "request body must be a JSON object");
}

#[tokio::test]
async fn a_body_field_over_the_limit_is_413() {
    let app = TestApp::new().await;
    let body = "x".repeat(65_537);
    let reply = app.post("/push", Some(&json!({"topic": "t", "body": body}))).await;
    reply.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "body must be at most 65536 bytes");
    let fits = app.post("/push", Some(&json!({"topic": "t", "body": "x".repeat(65_536)}))).await;
    assert_eq!(fits.status, StatusCode::OK);
}

#[tokio::test]
async fn a_request_over_the_size_limit_is_413_in_the_envelope() {
    let app = TestApp::with_config(|config| config.max_request_bytes = 1024).await;
    let reply = app.post("/push", Some(&json!({"topic": "t", "body": "x".repeat(2000)}))).await;
    reply.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "request body must be at most 1024 bytes");
    let batch = json!({"jobs": (0..50).map(|n| json!({"topic": "t", "body": format!("{n}")})).collect::<Vec<_>>()});
    app.post("/push/batch", Some(&batch)).await.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "1024 bytes");
}

#[tokio::test]
async fn pop_parameters_are_validated_by_name() {
    let app = TestApp::new().await;
    let cases = [
        ("/pop", "topic is required"),
        ("/pop?topic=a%20b", "topic may only contain"),
        ("/pop?topic=t&count=0", "count must be from 1 to 100"),
        ("/pop?topic=t&count=101", "count must be from 1 to 100"),
        ("/pop?topic=t&count=two", "count must be an integer"),
        ("/pop?topic=t&timeout=30001", "timeout must be from 0 to 30000"),
        ("/pop?topic=t&timeout=-1", "timeout must be from 0 to 30000"),
    ];
    for (uri, message) in cases {
        app.get(uri).await.assert_error(StatusCode::BAD_REQUEST, message);
    }
}

#[tokio::test]
async fn id_and_listing_parameters_are_validated_by_name() {
    let app = TestApp::new().await;
    let cases = [
        ("/jobs?state=delay", "topic is required"),
        ("/jobs?topic=t", "state is required"),
        ("/jobs?topic=t&state=pending", "state must be one of delay, ready, reserved"),
        ("/jobs?topic=t&state=ready&limit=0", "limit must be from 1 to 1000"),
        ("/jobs?topic=t&state=ready&limit=1001", "limit must be from 1 to 1000"),
        ("/jobs?topic=t&state=ready&cursor=garbage", "cursor is not valid"),
        ("/delete?jobId=a%20b", "jobId may only contain"),
        ("/delete?id=", "jobId is required"),
        ("/reStoreJob", "jobId is required"),
        ("/reStore?expire=maybe", "expire must be true or false"),
    ];
    for (uri, message) in cases {
        app.get(uri).await.assert_error(StatusCode::BAD_REQUEST, message);
    }
    app.post("/nack?jobId=x&delay=soon", None).await.assert_error(StatusCode::BAD_REQUEST, "delay must be an integer");
    app.post("/touch", None).await.assert_error(StatusCode::BAD_REQUEST, "jobId is required");
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_keep_the_envelope() {
    let app = TestApp::new().await;
    app.get("/nowhere").await.assert_error(StatusCode::NOT_FOUND, "no route GET /nowhere");
    app.get("/push").await.assert_error(StatusCode::METHOD_NOT_ALLOWED, "method GET is not allowed on /push");
    let wrong = app.send(Method::DELETE, "/pop?topic=t", None, None).await;
    assert_eq!(wrong.status, StatusCode::METHOD_NOT_ALLOWED);
}
