//! Admin and operations endpoints: restore, clearAll, stats, health, ready,
//! metrics, auth and the role seam.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use common::{TestApp, ADMIN_TOKEN, USER_TOKEN};
use delayq_controller::{Role, RoleInfo, RoleProvider};
use serde_json::json;

#[tokio::test]
async fn restore_counts_live_jobs_and_expire_false_skips_overdue_ones() {
    let app = TestApp::new().await;
    app.push(json!({"topic": "t", "body": "b", "delay": 60000})).await;
    app.push(json!({"topic": "t", "body": "b", "delay": 60000})).await;
    app.push(json!({"topic": "t", "body": "b", "runAt": 1000})).await;
    let skip = app.get("/reStore?expire=false").await;
    assert_eq!((skip.status, skip.data()), (StatusCode::OK, &json!({"restored": 2})));
    let all = app.post("/reStore", None).await;
    assert_eq!(all.data(), &json!({"restored": 3}));
    assert_eq!(app.pop("t", 10, 1000).await.len(), 1, "restore is idempotent: nothing doubled");
}

#[tokio::test]
async fn restore_job_takes_a_live_job_and_refuses_ended_or_unknown_ones() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "t", "body": "b"})).await;
    let reply = app.get(&format!("/reStoreJob?JobId={id}")).await;
    assert_eq!((reply.status, reply.data()), (StatusCode::OK, &json!({"id": id})));
    app.get("/reStoreJob?jobId=ghost").await.assert_error(StatusCode::NOT_FOUND, "ghost");
    app.pop("t", 1, 2000).await;
    assert_eq!(app.post(&format!("/finish?id={id}"), None).await.status, StatusCode::OK);
    app.get(&format!("/reStoreJob?id={id}")).await.assert_error(StatusCode::CONFLICT, "finished");
}

#[tokio::test]
async fn clear_all_deletes_every_live_job_on_get_and_post() {
    let app = TestApp::new().await;
    app.push(json!({"topic": "a", "body": "b"})).await;
    app.push(json!({"topic": "b", "body": "b", "delay": 60000})).await;
    let reply = app.get("/clearAll").await;
    assert_eq!((reply.status, reply.data()), (StatusCode::OK, &json!({"cleared": 2})));
    assert!(app.pop("a", 10, 0).await.is_empty());
    let again = app.post("/clearAll", None).await;
    assert_eq!(again.data(), &json!({"cleared": 0}));
}

#[tokio::test]
async fn stats_counts_per_topic_and_state_with_role_and_backends() {
    let app = TestApp::new().await;
    app.push(json!({"topic": "s", "body": "b", "delay": 60000})).await;
    let id = app.push(json!({"topic": "s", "body": "b"})).await;
    app.pop("s", 1, 2000).await;
    app.post(&format!("/finish?jobId={id}"), None).await;
    let reply = app.get("/stats").await;
    assert_eq!(reply.status, StatusCode::OK);
    let data = reply.data();
    let counts = &data["topics"]["s"];
    assert_eq!((counts["delay"].as_u64(), counts["finished"].as_u64()), (Some(1), Some(1)));
    assert_eq!((counts["ready"].as_u64(), counts["reserved"].as_u64()), (Some(0), Some(0)));
    assert_eq!(data["totals"]["delay"], 1);
    assert_eq!(data["role"], "standalone");
    assert_eq!(data["backends"], json!({"scheduler": "memory", "store": "sqlite"}));
}

#[tokio::test]
async fn stats_shows_the_role_the_provider_gives() {
    let role: RoleProvider = Arc::new(|| RoleInfo {
        role: Role::Follower,
        leader: Some("node-a".into()),
        members: vec!["node-a".into(), "node-b".into()],
        coordinator: Some("zookeeper"),
    });
    let app = TestApp::build(|_| {}, |state| state.with_role(role)).await;
    let data = app.get("/stats").await.body["data"].clone();
    assert_eq!((data["role"].as_str(), data["leader"].as_str()), (Some("follower"), Some("node-a")));
    assert_eq!(data["members"], json!(["node-a", "node-b"]));
    let ready = app.get("/ready").await;
    assert_eq!(ready.body["data"]["backends"]["zookeeper"], "up", "{:?}", ready.body);
}

#[tokio::test]
async fn health_and_ready_answer_and_ready_names_a_failing_backend() {
    let app = TestApp::new().await;
    assert_eq!(app.get("/health").await.status, StatusCode::OK);
    let ready = app.get("/ready").await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.data()["backends"], json!({"memory": "up", "sqlite": "up"}));

    app.queue.close().await;
    let down = app.get("/ready").await;
    down.assert_error(StatusCode::SERVICE_UNAVAILABLE, "sqlite is unavailable");
    assert_eq!(down.data()["backends"]["sqlite"], "down");
    let push = app.post("/push", Some(&json!({"topic": "t", "body": "b"}))).await;
    push.assert_error(StatusCode::SERVICE_UNAVAILABLE, "sqlite is unavailable");
    assert_eq!(app.get("/health").await.status, StatusCode::OK, "health does not depend on backends");
}

#[tokio::test]
async fn metrics_render_prometheus_text_with_job_gauges_and_http_counters() {
    let app = TestApp::new().await;
    app.push(json!({"topic": "m", "body": "b", "delay": 60000})).await;
    let (status, body) = app.exchange(Method::GET, "/metrics", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("delayq_jobs{state=\"delay\"}"), "{text}");
    assert!(text.contains("delayq_http_requests_total"), "{text}");
    assert!(text.contains("route=\"/push\""), "{text}");
    assert!(text.contains("delayq_pushes_total"), "{text}");
}

#[tokio::test]
async fn auth_needs_a_token_everywhere_but_health_and_an_admin_token_for_admin_routes() {
    let app = TestApp::with_auth().await;
    assert_eq!(app.get("/health").await.status, StatusCode::OK);
    app.get("/stats").await.assert_error(StatusCode::UNAUTHORIZED, "authorization is required");
    let (status, _) = app.exchange(Method::GET, "/metrics", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let unknown = app.send(Method::GET, "/stats", None, Some("guess")).await;
    unknown.assert_error(StatusCode::UNAUTHORIZED, "token is not valid");
    assert_eq!(app.send(Method::GET, "/stats", None, Some(USER_TOKEN)).await.status, StatusCode::OK);
    let job = json!({"topic": "t", "body": "b"});
    assert_eq!(app.send(Method::POST, "/push", Some(&job), Some(USER_TOKEN)).await.status, StatusCode::OK);
    assert_eq!(app.send(Method::POST, "/push", Some(&job), Some(ADMIN_TOKEN)).await.status, StatusCode::OK);

    for admin_route in ["/clearAll", "/reStore", "/reStoreJob?jobId=x"] {
        let user = app.send(Method::GET, admin_route, None, Some(USER_TOKEN)).await;
        user.assert_error(StatusCode::FORBIDDEN, "admin token is required");
        let anonymous = app.send(Method::GET, admin_route, None, None).await;
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{admin_route}");
    }
    let cleared = app.send(Method::POST, "/clearAll", None, Some(ADMIN_TOKEN)).await;
    assert_eq!((cleared.status, cleared.data()), (StatusCode::OK, &json!({"cleared": 2})));
}
