//! The harness of the controller tests: a real `DelayQueue` (memory scheduler,
//! SQLite store in a temp dir, timer and fan-out running) behind `router()`,
//! called with `oneshot` and no socket.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use delayq_common::Snowflake;
use delayq_controller::{router, AppState, ControllerConfig};
use delayq_queue::{run_fan_out, run_timer, DelayQueue, MemoryScheduler, QueueSettings};
use delayq_store::SqliteStore;
use http_body_util::BodyExt;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::Value;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// A user token of [`TestApp::with_auth`].
pub const USER_TOKEN: &str = "user-secret";
/// An admin token of [`TestApp::with_auth`].
pub const ADMIN_TOKEN: &str = "admin-secret";

/// One server under test; the timer and the fan-out stop when it is dropped.
pub struct TestApp {
    pub router: Router,
    pub queue: Arc<DelayQueue>,
    cancel: CancellationToken,
    _dir: TempDir,
}

/// A response: its status, the raw body and the envelope checked.
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
}

impl Reply {
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }

    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap()
    }

    /// Asserts a failure with this status and a message containing `needle`.
    pub fn assert_error(&self, status: StatusCode, needle: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert!(self.message().contains(needle), "{:?} does not contain {needle:?}", self.message());
    }
}

/// The Prometheus handle, installed globally once so facade metrics reach it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder().handle())
        })
        .clone()
}

impl TestApp {
    pub async fn new() -> TestApp {
        TestApp::with_config(|_| {}).await
    }

    pub async fn with_auth() -> TestApp {
        TestApp::with_config(|config| {
            config.tokens = vec![USER_TOKEN.to_owned()];
            config.admin_tokens = vec![ADMIN_TOKEN.to_owned()];
        })
        .await
    }

    pub async fn with_config(adjust: impl FnOnce(&mut ControllerConfig)) -> TestApp {
        TestApp::build(adjust, |state| state).await
    }

    pub async fn build(adjust: impl FnOnce(&mut ControllerConfig), wrap: impl FnOnce(AppState) -> AppState) -> TestApp {
        TestApp::build_with_settings(QueueSettings::default(), adjust, wrap).await
    }

    /// Builds a server whose queue has `settings` (job limits, defaults).
    pub async fn build_with_settings(
        settings: QueueSettings,
        adjust: impl FnOnce(&mut ControllerConfig),
        wrap: impl FnOnce(AppState) -> AppState,
    ) -> TestApp {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path(), "test-node".to_owned()).await.unwrap();
        let queue =
            Arc::new(DelayQueue::new(Arc::new(MemoryScheduler::new()), Arc::new(store), Snowflake::new(1), settings));
        let cancel = CancellationToken::new();
        tokio::spawn(run_timer(queue.clone(), cancel.clone()));
        tokio::spawn(run_fan_out(queue.clone(), cancel.clone(), || true));
        let mut config = ControllerConfig::new(metrics_handle());
        adjust(&mut config);
        let router = router(wrap(AppState::new(queue.clone(), config)));
        TestApp { router, queue, cancel, _dir: dir }
    }

    /// Sends a request with an optional JSON body and bearer token.
    pub async fn send(&self, method: Method, uri: &str, body: Option<&Value>, token: Option<&str>) -> Reply {
        let raw = body.map(|body| body.to_string().into_bytes());
        self.send_raw(method, uri, raw, token).await
    }

    /// Sends raw bytes as a JSON body and checks the envelope of the answer.
    pub async fn send_raw(&self, method: Method, uri: &str, body: Option<Vec<u8>>, token: Option<&str>) -> Reply {
        let (status, bytes) = self.exchange(method, uri, body, token).await;
        let body: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| panic!("{uri}: not JSON: {}", String::from_utf8_lossy(&bytes)));
        assert_envelope(status, &body);
        Reply { status, body }
    }

    /// Sends a request and returns the status and raw body, unchecked.
    pub async fn exchange(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
        token: Option<&str>,
    ) -> (StatusCode, Vec<u8>) {
        let mut request = Request::builder().method(method).uri(uri);
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(body.map(Body::from).unwrap_or_else(Body::empty)).unwrap();
        self.exchange_request(request).await
    }

    /// Sends a prepared request and returns the status and raw body, unchecked.
    pub async fn exchange_request(&self, request: Request<Body>) -> (StatusCode, Vec<u8>) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes().to_vec();
        (status, bytes)
    }

    pub async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, None, None).await
    }

    pub async fn post(&self, uri: &str, body: Option<&Value>) -> Reply {
        self.send(Method::POST, uri, body, None).await
    }

    /// Pushes a job and returns its id, asserting success.
    pub async fn push(&self, job: Value) -> String {
        let reply = self.post("/push", Some(&job)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply.data()["id"].as_str().unwrap().to_owned()
    }

    /// Pops up to `count` jobs of `topic`, waiting up to `timeout_ms`.
    pub async fn pop(&self, topic: &str, count: u32, timeout_ms: u32) -> Vec<Value> {
        let reply = self.get(&format!("/pop?topic={topic}&count={count}&timeout={timeout_ms}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply.data().as_array().unwrap().clone()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Every response is `{"success", "message", "data"}` with `success` matching the status.
pub fn assert_envelope(status: StatusCode, body: &Value) {
    let object = body.as_object().unwrap_or_else(|| panic!("envelope is not an object: {body}"));
    assert_eq!(object.len(), 3, "envelope has exactly three fields: {body}");
    assert_eq!(object["success"].as_bool(), Some(status == StatusCode::OK), "{status}: {body}");
    assert!(object["message"].is_string(), "{body}");
    assert!(object.contains_key("data"), "{body}");
}

/// Returns the current epoch milliseconds.
pub fn now_ms() -> u64 {
    delayq_common::Timestamp::now().as_millis()
}
