//! Start-up checks of the real binary: a node listening beyond loopback
//! without auth refuses to start (unless `auth.allow_unauthenticated`), a
//! refused configuration names its key without quoting a secret, and the
//! SQLite durability setting can be chosen from the environment.

mod common;

use std::process::Output;

use common::Server;
use delayq_rpc::pb::v1 as pb;
use delayq_rpc::pb::v1::delay_queue_service_client::DelayQueueServiceClient;
use serde_json::{json, Value};

const TOKEN: &str = "e2e-startup-token";

/// Asserts the process failed before it listened, and returns its stderr.
fn refused(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "expected a refusal; stdout: {stdout}; stderr: {stderr}");
    assert!(!stdout.contains("delayq listening"), "it listened before refusing: {stdout}");
    stderr
}

/// The base URL to reach a server through loopback, whatever address it listens on.
fn local_url(server: &Server) -> String {
    server.base_url.replace("0.0.0.0", "127.0.0.1")
}

/// The gRPC address to reach a server through loopback.
fn local_grpc(server: &Server) -> String {
    server.grpc_addr.replace("0.0.0.0", "127.0.0.1")
}

/// GETs `path` with an optional bearer token; returns the status and envelope.
async fn get(base_url: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("{base_url}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json envelope"))
}

async fn grpc_stats(addr: &str, token: Option<&str>) -> Result<pb::StatsReply, tonic::Status> {
    let channel = common::grpc_channel(addr).await;
    let mut request = tonic::Request::new(pb::StatsRequest::default());
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ascii"));
    }
    DelayQueueServiceClient::new(channel).stats(request).await.map(tonic::Response::into_inner)
}

/// The `synchronous` setting the server logged when it opened its SQLite store.
fn synchronous_in_log(log: &str) -> &'static str {
    let line = log.lines().find(|line| line.contains("sqlite store opened")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("synchronous"), "{line}");
    match (line.contains("\"full\""), line.contains("\"normal\"")) {
        (true, false) => "full",
        (false, true) => "normal",
        _ => panic!("no single setting in {line}"),
    }
}

/// A push, pop and finish through `base_url`, without a token.
async fn push_pop_finish(base_url: &str, topic: &str) {
    let client = common::Client::new(base_url);
    let (status, pushed) = client.post("/push", &json!({"topic": topic, "body": "b", "delay": 0})).await.expect("push");
    assert_eq!(status, 200, "{pushed}");
    let id = pushed["data"]["id"].as_str().expect("id").to_owned();
    let (status, popped) = client.get(&format!("/pop?topic={topic}&timeout=5000")).await.expect("pop");
    assert_eq!(status, 200, "{popped}");
    assert_eq!(popped["data"][0]["id"], id.as_str(), "{popped}");
    let (status, finished) = client.post(&format!("/finish?jobId={id}"), &json!({})).await.expect("finish");
    assert_eq!(status, 200, "{finished}");
}

#[tokio::test]
async fn every_interface_without_tokens_is_refused_before_anything_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = common::serve_until_exit(dir.path(), &[("DELAYQ_HTTP_ADDR", "0.0.0.0:0")]).await;
    let stderr = refused(&output);
    for needle in [
        "server.http_addr = 0.0.0.0:0",
        "auth.tokens",
        "DELAYQ_AUTH__TOKENS",
        "auth.allow_unauthenticated",
        "DELAYQ_AUTH__ALLOW_UNAUTHENTICATED",
    ] {
        assert!(stderr.contains(needle), "{needle} missing from stderr: {stderr}");
    }
    // Refused before the store was opened: the data directory was never made.
    assert!(!dir.path().join("data").exists(), "the store was opened before the refusal");
}

#[tokio::test]
async fn a_grpc_listener_beyond_loopback_without_tokens_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = common::serve_until_exit(dir.path(), &[("DELAYQ_GRPC_ADDR", "[::]:0")]).await;
    let stderr = refused(&output);
    assert!(stderr.contains("server.grpc_addr = [::]:0"), "{stderr}");
    assert!(stderr.contains("auth.tokens"), "{stderr}");
    assert!(!stderr.contains("server.http_addr"), "the REST listener is on loopback: {stderr}");
}

#[tokio::test]
async fn the_opt_out_serves_every_interface_without_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("DELAYQ_HTTP_ADDR", "0.0.0.0:0"),
        ("DELAYQ_GRPC_ADDR", "0.0.0.0:0"),
        ("DELAYQ_AUTH__ALLOW_UNAUTHENTICATED", "true"),
    ];
    let server = Server::start(dir.path(), &env).await;
    assert!(server.base_url.starts_with("http://0.0.0.0:"), "{}", server.base_url);
    let url = local_url(&server);
    let (status, stats) = get(&url, "/stats", None).await;
    assert_eq!(status, 200, "open by choice: no token needed: {stats}");
    push_pop_finish(&url, "e2e.startup.open").await;
    assert!(grpc_stats(&local_grpc(&server), None).await.is_ok(), "gRPC is open too");
    let log = server.log();
    assert!(log.contains("WITHOUT authentication"), "the opt-out is logged as a warning: {log}");
    assert!(server.terminate().await, "server exits cleanly");
}

#[tokio::test]
async fn every_interface_with_a_token_serves_and_refuses_requests_without_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = format!("[\"{TOKEN}\"]");
    let env = [
        ("DELAYQ_HTTP_ADDR", "0.0.0.0:0"),
        ("DELAYQ_GRPC_ADDR", "0.0.0.0:0"),
        ("DELAYQ_AUTH__TOKENS", tokens.as_str()),
    ];
    let server = Server::start(dir.path(), &env).await;
    let url = local_url(&server);

    let (status, refused) = get(&url, "/stats", None).await;
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["success"], false, "{refused}");
    let (status, refused) = get(&url, "/stats", Some("not-the-token")).await;
    assert_eq!(status, 401, "{refused}");
    let (status, stats) = get(&url, "/stats", Some(TOKEN)).await;
    assert_eq!(status, 200, "{stats}");
    let (status, health) = get(&url, "/health", None).await;
    assert_eq!(status, 200, "/health stays open for probes: {health}");

    let grpc = local_grpc(&server);
    let refused = grpc_stats(&grpc, None).await.expect_err("no token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    grpc_stats(&grpc, Some(TOKEN)).await.expect("with the token");

    assert!(!server.log().contains(TOKEN), "the token is never logged");
    assert!(server.terminate().await, "server exits cleanly");
}

#[tokio::test]
async fn loopback_without_tokens_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The defaults of the test server: REST and gRPC on 127.0.0.1.
    let server = Server::start(dir.path(), &[]).await;
    let (status, stats) = get(&server.base_url, "/stats", None).await;
    assert_eq!(status, 200, "{stats}");
    assert!(grpc_stats(&server.grpc_addr, None).await.is_ok());
    assert!(!server.log().contains("WITHOUT authentication"), "no warning on loopback");
    assert!(server.terminate().await, "server exits cleanly");

    // And on IPv6 loopback with gRPC off, where the machine has one.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Server::start(dir.path(), &[("DELAYQ_HTTP_ADDR", "[::1]:0"), ("DELAYQ_GRPC_ADDR", "off")]).await;
        assert_eq!(server.grpc_addr, "off");
        let (status, stats) = get(&server.base_url, "/stats", None).await;
        assert_eq!(status, 200, "{stats}");
        assert!(server.terminate().await, "server exits cleanly");
    }
}

#[tokio::test]
async fn a_malformed_token_list_is_refused_without_quoting_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = common::serve_until_exit(dir.path(), &[("DELAYQ_AUTH__TOKENS", "8675309123")]).await;
    let stderr = refused(&output);
    assert!(stderr.contains("auth.tokens"), "{stderr}");
    assert!(!stderr.contains("8675309123"), "the value is quoted: {stderr}");
}

#[tokio::test]
async fn sqlite_synchronous_normal_serves_and_fast_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[("DELAYQ_STORE__SQLITE_SYNCHRONOUS", "normal")]).await;
    push_pop_finish(&server.base_url, "e2e.startup.normal").await;
    assert_eq!(synchronous_in_log(&server.log()), "normal", "as SQLite applied it");
    assert!(server.terminate().await, "server exits cleanly");

    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    assert_eq!(synchronous_in_log(&server.log()), "full", "the default");
    assert!(server.terminate().await, "server exits cleanly");

    let dir = tempfile::tempdir().expect("tempdir");
    let output = common::serve_until_exit(dir.path(), &[("DELAYQ_STORE__SQLITE_SYNCHRONOUS", "fast")]).await;
    let stderr = refused(&output);
    assert!(stderr.contains("store.sqlite_synchronous"), "{stderr}");
    assert!(stderr.contains("full") && stderr.contains("normal"), "the accepted values are listed: {stderr}");
}
