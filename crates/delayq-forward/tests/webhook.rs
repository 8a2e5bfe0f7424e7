//! The webhook sink against a real HTTP server (axum): retries with the job's
//! backoff, headers, signature, dead after maxRetries, unrouted topics stay pull,
//! redirects are failures.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::routing::{any, post};
use axum::Router;
use common::Harness;
use delayq_common::{JobState, Topic};
use delayq_forward::testsuite::{self, Delivered, Destination};
use delayq_forward::{webhook_signature, WebhookSink};
use delayq_testkit::eventually;
use serde_json::{json, Value};

/// One request the test server received.
#[derive(Clone, Debug)]
struct Received {
    at: Instant,
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or_default()
    }
}

#[derive(Clone)]
struct Endpoint {
    received: Arc<Mutex<Vec<Received>>>,
    /// The status of the n-th answer (the last one repeats).
    statuses: Arc<Vec<StatusCode>>,
}

async fn due(State(endpoint): State<Endpoint>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let mut received = endpoint.received.lock().unwrap();
    received.push(Received { at: Instant::now(), headers, body });
    let index = (received.len() - 1).min(endpoint.statuses.len() - 1);
    endpoint.statuses[index]
}

/// Starts a webhook endpoint answering `statuses` in turn; returns its URL and what it received.
async fn start_endpoint(statuses: Vec<StatusCode>) -> (String, Arc<Mutex<Vec<Received>>>) {
    let endpoint = Endpoint { received: Arc::default(), statuses: Arc::new(statuses) };
    let received = endpoint.received.clone();
    let app = Router::new().route("/due", post(due)).with_state(endpoint);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/due"), received)
}

fn webhook(url: &str, secret: Option<&str>) -> Arc<WebhookSink> {
    Arc::new(WebhookSink::new(url, secret, Duration::from_secs(5)).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_answering_500_twice_gets_the_job_on_the_third_attempt_after_the_backoff() {
    let error = StatusCode::INTERNAL_SERVER_ERROR;
    let (url, received) = start_endpoint(vec![error, error, StatusCode::OK]).await;
    let harness = Harness::start(&["hook.*"], webhook(&url, Some("s3cret")), |_| {}).await;
    let pushed_at = Instant::now();
    let ids = harness
        .push_all(vec![json!({
            "topic": "hook.order", "subtopic": "eu", "body": "{\"orderId\":7}", "delay": 200,
            "maxRetries": 5, "retryBackoff": [500, 1000]
        })])
        .await;
    let id = &ids[0];
    let finished = harness.reaches(id, JobState::Finished, Duration::from_secs(20)).await;
    assert!(finished, "the job is finished once the webhook answered 200");

    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 3, "two 500s, then the 200");
    let attempts: Vec<&str> = received.iter().map(|request| request.header("delayq-attempt")).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    assert!(received[0].at.duration_since(pushed_at) >= Duration::from_millis(200), "not before its delay");
    let first_gap = received[1].at.duration_since(received[0].at);
    let second_gap = received[2].at.duration_since(received[1].at);
    assert!(first_gap >= Duration::from_millis(500), "first retry after its 500 ms backoff, was {first_gap:?}");
    assert!(second_gap >= Duration::from_millis(1000), "second retry after its 1000 ms backoff, was {second_gap:?}");
    for request in &received {
        assert_eq!(request.header("delayq-id"), id.as_str());
        assert_eq!(request.header("delayq-topic"), "hook.order");
        assert_eq!(request.header("content-type"), "application/json");
        let expected = format!("sha256={}", webhook_signature(b"s3cret", &request.body));
        assert_eq!(request.header("delayq-signature"), expected, "HMAC-SHA256 of the exact body");
        let job: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(job["id"], id.as_str());
        assert_eq!(job["body"], "{\"orderId\":7}");
        assert_eq!(job["subtopic"], "eu");
        assert_eq!(request.header("delayq-run-at"), job["runAt"].to_string());
    }
    assert_eq!(harness.route().counters().published(), 1);
    assert_eq!(harness.route().counters().failed(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_dead_after_max_retries_of_failed_posts() {
    let (url, received) = start_endpoint(vec![StatusCode::SERVICE_UNAVAILABLE]).await;
    let harness = Harness::start(&["hook.*"], webhook(&url, None), |_| {}).await;
    let ids = harness
        .push_all(vec![json!({"topic": "hook.dead", "body": "x", "maxRetries": 1, "retryBackoff": [100]})])
        .await;
    let id = &ids[0];
    let dead = harness.reaches(id, JobState::Dead, Duration::from_secs(15)).await;
    assert!(dead, "out of retries after two failed posts");
    assert_eq!(received.lock().unwrap().len(), 2, "maxRetries 1: the first delivery and one retry");
    assert!(received.lock().unwrap().iter().all(|request| request.headers.get("delayq-signature").is_none()));
    assert_eq!(harness.route().counters().dead(), 1);
    assert_eq!(harness.route().counters().published(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_without_a_route_stay_pull() {
    let (url, received) = start_endpoint(vec![StatusCode::OK]).await;
    let harness = Harness::start(&["hook.*"], webhook(&url, None), |_| {}).await;
    let ids = harness
        .push_all(vec![json!({"topic": "pull.only", "body": "p"}), json!({"topic": "hook.routed", "body": "r"})])
        .await;
    let routed_done = harness.reaches(&ids[1], JobState::Finished, Duration::from_secs(10)).await;
    assert!(routed_done);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(harness.state(&ids[0]).await, JobState::Ready, "nobody forwards an unrouted topic");
    let popped = harness.queue.pop(&Topic::parse("pull.only").unwrap(), 10, Duration::ZERO).await.unwrap();
    assert_eq!(popped.len(), 1);
    assert_eq!(popped[0].id, ids[0]);
    assert_eq!(received.lock().unwrap().len(), 1, "only the routed job was posted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_webhook_keeps_the_job_until_it_answers() {
    // Reserve a free port, then close it: nothing listens there yet.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let sink = webhook(&format!("http://{addr}/due"), None);
    let harness = Harness::start(&["hook.*"], sink, |_| {}).await;
    let ids = harness
        .push_all(vec![json!({"topic": "hook.later", "body": "x", "maxRetries": 50, "retryBackoff": [200]})])
        .await;
    let failed_twice = eventually(Duration::from_secs(10), || async { harness.route().counters().failed() >= 2 }).await;
    assert!(failed_twice, "connection refused counts as a failure and is retried");
    assert_ne!(harness.state(&ids[0]).await, JobState::Finished);

    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let endpoint = Endpoint { received: received.clone(), statuses: Arc::new(vec![StatusCode::NO_CONTENT]) };
    let app = Router::new().route("/due", post(due)).with_state(endpoint);
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let finished = harness.reaches(&ids[0], JobState::Finished, Duration::from_secs(10)).await;
    assert!(finished, "delivered once the endpoint is up (204 is a 2xx)");
    assert_eq!(received.lock().unwrap().len(), 1);
}

/// Starts an endpoint whose `/due` answers `status` with `Location: /elsewhere`, and whose
/// `/elsewhere` answers 200 to any method; returns the URL of `/due`, the requests `/due`
/// received and the methods `/elsewhere` received.
async fn start_redirecting_endpoint(
    status: StatusCode,
) -> (String, Arc<Mutex<Vec<Received>>>, Arc<Mutex<Vec<Method>>>) {
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let elsewhere: Arc<Mutex<Vec<Method>>> = Arc::default();
    let (due_log, elsewhere_log) = (received.clone(), elsewhere.clone());
    let app = Router::new()
        .route(
            "/due",
            post(move |headers: HeaderMap, body: Bytes| async move {
                due_log.lock().unwrap().push(Received { at: Instant::now(), headers, body });
                (status, [(header::LOCATION, "/elsewhere")])
            }),
        )
        .route(
            "/elsewhere",
            any(move |method: Method| async move {
                elsewhere_log.lock().unwrap().push(method);
                StatusCode::OK
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/due"), received, elsewhere)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failed_delivery_and_is_never_followed() {
    for status in [StatusCode::FOUND, StatusCode::TEMPORARY_REDIRECT, StatusCode::MOVED_PERMANENTLY] {
        let (url, received, elsewhere) = start_redirecting_endpoint(status).await;
        let harness = Harness::start(&["hook.*"], webhook(&url, None), |_| {}).await;
        let ids = harness
            .push_all(vec![json!({"topic": "hook.moved", "body": "x", "maxRetries": 1, "retryBackoff": [100]})])
            .await;
        let id = &ids[0];
        let dead = harness.reaches(id, JobState::Dead, Duration::from_secs(15)).await;
        assert!(dead, "{status}: a redirect is a failure; the job is dead after maxRetries, not finished");
        assert_eq!(received.lock().unwrap().len(), 2, "{status}: the first delivery and one retry");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(elsewhere.lock().unwrap().is_empty(), "{status}: the redirect target is never called");
        let counters = harness.route().counters();
        assert_eq!((counters.published(), counters.failed(), counters.dead()), (0, 2, 1), "{status}");
    }
}

/// What the endpoint received, as the conformance checks read it.
struct EndpointDestination(Arc<Mutex<Vec<Received>>>);

#[async_trait::async_trait]
impl Destination for EndpointDestination {
    async fn delivered(&self) -> Vec<Delivered> {
        let received = self.0.lock().unwrap().clone();
        received
            .iter()
            .map(|request| {
                let job: Value = serde_json::from_slice(&request.body).unwrap();
                let headers = request
                    .headers
                    .iter()
                    .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or_default().to_owned()))
                    .collect();
                Delivered { headers, body: job["body"].as_str().unwrap_or_default().to_owned() }
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_sink_passes_the_conformance_checks() {
    let (url, received) = start_endpoint(vec![StatusCode::OK]).await;
    let sink = webhook(&url, None);
    let destination = EndpointDestination(received);
    testsuite::confirms_every_job_with_its_headers_and_body(sink.as_ref(), &destination).await;
    testsuite::an_empty_batch_publishes_nothing(sink.as_ref(), &destination).await;
}
