//! Forwarding end to end: `delayq serve` with `[forward]` routes in its config
//! file. A malformed route or an unknown sink type fails the start with a
//! message naming it; a webhook route delivers a pushed job when it is due.

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use common::{now_ms, Server};
use serde_json::{json, Value};
use tokio::process::Command;

/// Runs `delayq serve --config FILE` and returns its exit success and stderr.
async fn serve_with_config(dir: &std::path::Path, toml: &str) -> (bool, String) {
    let path = dir.join("delayq.toml");
    std::fs::write(&path, toml).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .current_dir(dir)
        .env("DELAYQ_HTTP_ADDR", "127.0.0.1:0")
        .env("DELAYQ_GRPC_ADDR", "127.0.0.1:0")
        .env("DELAYQ_DATA_DIR", dir.join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("a bad config stops the start at once")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("delayq listening"), "it must not start listening: {stdout}");
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn an_unknown_sink_type_fails_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stderr) = serve_with_config(
        dir.path(),
        "[[forward.routes]]\ntopics = [\"order.*\"]\nsink = \"rabbit\"\nurl = \"amqp://127.0.0.1\"\n",
    )
    .await;
    assert!(!ok);
    assert!(stderr.contains("forward.routes[0].sink"), "{stderr}");
    assert!(stderr.contains("unknown sink type \"rabbit\""), "{stderr}");
}

#[tokio::test]
async fn malformed_routes_fail_the_start_naming_the_key() {
    let cases = [
        // An unknown key.
        ("[[forward.routes]]\ntopics = [\"a.*\"]\nsink = \"log\"\nrouting = \"x\"\n", "routing"),
        // A key of another sink type.
        (
            "[[forward.routes]]\ntopics = [\"a.*\"]\nsink = \"webhook\"\nurl = \"http://127.0.0.1:1/\"\nbrokers = \"b\"\n",
            "forward.routes[0].brokers",
        ),
        // A required key missing.
        ("[[forward.routes]]\ntopics = [\"a.*\"]\nsink = \"kafka\"\n", "forward.routes[0].brokers"),
        // A bad template in the second route.
        (
            "[[forward.routes]]\ntopics = [\"a.*\"]\nsink = \"log\"\n\n[[forward.routes]]\ntopics = [\"b\"]\nsink = \"rabbitmq\"\nurl = \"amqp://127.0.0.1\"\nrouting_key = \"{tpoic}\"\n",
            "forward.routes[1].routing_key",
        ),
        // No topics.
        ("[[forward.routes]]\nsink = \"log\"\n", "forward.routes[0].topics"),
        // A pattern with a character no topic has.
        ("[[forward.routes]]\ntopics = [\"a/b/c\"]\nsink = \"log\"\n", "forward.routes[0].topics"),
    ];
    for (toml, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (ok, stderr) = serve_with_config(dir.path(), toml).await;
        assert!(!ok, "{toml}");
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    }
}

type Received = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn hook(State(received): State<Received>, headers: HeaderMap, body: Bytes) -> StatusCode {
    received.lock().unwrap().push((headers, body));
    StatusCode::OK
}

#[tokio::test]
async fn a_webhook_route_delivers_due_jobs_and_other_topics_stay_pull() {
    let received: Received = Arc::default();
    let app = Router::new().route("/due", post(hook)).with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    // Server::start passes no --config: the file is found as config/delayq.toml in its working directory.
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    std::fs::write(
        dir.path().join("config/delayq.toml"),
        format!(
            "[[forward.routes]]\ntopics = [\"hook.*\"]\nsink = \"webhook\"\nurl = \"http://{hook_addr}/due\"\nsecret = \"k\"\n"
        ),
    )
    .unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();

    let pushed_at = now_ms();
    let (status, reply) =
        client.post("/push", &json!({"topic": "hook.order", "body": "due!", "delay": 300})).await.unwrap();
    assert_eq!(status, 200, "{reply}");
    let id = reply["data"]["id"].as_str().unwrap().to_owned();
    let (status, _) = client.post("/push", &json!({"topic": "pull.order", "body": "pull"})).await.unwrap();
    assert_eq!(status, 200);

    let mut state = Value::Null;
    for _ in 0..100 {
        let (_, job) = client.get(&format!("/jobs/{id}")).await.unwrap();
        state = job["data"]["state"].clone();
        if state == "finished" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state, "finished", "the webhook confirmed it; log: {}", server.log());
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    let (headers, body) = &received[0];
    assert_eq!(headers["delayq-id"], id.as_str());
    assert_eq!(headers["delayq-topic"], "hook.order");
    assert!(headers["delayq-signature"].to_str().unwrap().starts_with("sha256="));
    let run_at: u64 = headers["delayq-run-at"].to_str().unwrap().parse().unwrap();
    assert!(run_at >= pushed_at + 300);
    let job: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(job["body"], "due!");

    let (status, popped) = client.get("/pop?topic=pull.order").await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(popped["data"][0]["body"], "pull", "an unrouted topic is still popped");
    let (_, popped) = client.get("/pop?topic=hook.order").await.unwrap();
    assert_eq!(popped["data"], json!([]), "a forwarded job is not popped");
    let metrics = client.get_text("/metrics").await.unwrap().1;
    assert!(metrics.contains("delayq_forward_published_total{sink=\"webhook\"} 1"), "{metrics}");
}
