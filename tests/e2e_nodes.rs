//! Nodes sharing a Redis prefix must share their store: a node whose store is
//! its own (SQLite in its data directory) is refused at start while another
//! node with another store is live there.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{unique_name, Server};
use delayq_testkit::service;
use sqlx::Connection;
use tokio::process::Command;

/// Runs `delayq serve` in `dir` with `env`, expecting it to stop by itself;
/// returns its exit success and stderr.
async fn serve_until_exit(dir: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_delayq"));
    command
        .arg("serve")
        .current_dir(dir)
        .env("DELAYQ_HTTP_ADDR", "127.0.0.1:0")
        .env("DELAYQ_GRPC_ADDR", "127.0.0.1:0")
        .env("DELAYQ_DATA_DIR", dir.join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().expect("spawn delayq serve");
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("a refused node stops at once")
        .expect("wait for delayq serve");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("delayq listening"), "a refused node never listens: {stdout}");
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

fn node_dir(root: &Path, name: &str) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("node dir");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_store_of_its_own_is_refused_while_another_is_live() {
    let Some(redis_url) = service("DELAYQ_TEST_REDIS_URL") else { return };
    let prefix = unique_name("dq_e2e_nodes_own");
    let root = tempfile::tempdir().expect("tempdir");
    let env = |node: &'static str| {
        vec![
            ("DELAYQ_REDIS_URL", redis_url.as_str()),
            ("DELAYQ_SCHEDULER__REDIS_PREFIX", prefix.as_str()),
            ("DELAYQ_NODE_ID", node),
        ]
    };
    let first_env = env("node-a");
    let first = Server::start(&node_dir(root.path(), "a"), &first_env).await;

    let second_env = env("node-b");
    let second_dir = node_dir(root.path(), "b");
    let (started, stderr) = serve_until_exit(&second_dir, &second_env).await;
    assert!(!started, "the second node exits with an error");
    assert!(stderr.contains("DELAYQ_DATABASE_URL"), "the error names the setting to fix: {stderr}");
    assert!(stderr.contains("store.database_url"), "and its config key: {stderr}");
    assert!(stderr.contains("node-a"), "and the node already there: {stderr}");

    let (status, health) = first.client().get("/health").await.expect("health");
    assert_eq!(status, 200, "the first node keeps serving: {health}");
    assert!(first.terminate().await, "the first node stops cleanly");
    // A node that shut down left the registry: the prefix is free again.
    let second = Server::start(&second_dir, &second_env).await;
    assert!(second.terminate().await, "the second node starts once the first has left");
}

/// A fresh database on the test server; returns its URL.
async fn fresh_database(root_url: &str, name: &str) -> String {
    let mut connection = sqlx::MySqlConnection::connect(root_url).await.expect("connect to mariadb");
    sqlx::query(&format!("CREATE DATABASE `{name}`")).execute(&mut connection).await.expect("create database");
    let base = root_url.rsplit_once('/').map(|(base, _)| base).expect("url has a database");
    format!("{base}/{name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_one_database_start_together() {
    let (Some(redis_url), Some(mysql_url)) = (service("DELAYQ_TEST_REDIS_URL"), service("DELAYQ_TEST_MYSQL_URL"))
    else {
        return;
    };
    let name = unique_name("dq_e2e_nodes_shared");
    let database_url = fresh_database(&mysql_url, &name).await;
    let root = tempfile::tempdir().expect("tempdir");
    let mut nodes = Vec::new();
    for node in ["a", "b"] {
        let env = [
            ("DELAYQ_REDIS_URL", redis_url.as_str()),
            ("DELAYQ_DATABASE_URL", database_url.as_str()),
            ("DELAYQ_SCHEDULER__REDIS_PREFIX", name.as_str()),
            ("DELAYQ_NODE_ID", node),
        ];
        nodes.push(Server::start(&node_dir(root.path(), node), &env).await);
    }
    for node in &nodes {
        let (status, health) = node.client().get("/health").await.expect("health");
        assert_eq!(status, 200, "{health}");
    }
    for node in nodes {
        assert!(node.terminate().await, "each node stops cleanly");
    }
    let mut connection = sqlx::MySqlConnection::connect(&mysql_url).await.expect("connect to mariadb");
    sqlx::query(&format!("DROP DATABASE `{name}`")).execute(&mut connection).await.expect("drop database");
}
