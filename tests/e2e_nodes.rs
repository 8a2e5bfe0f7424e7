//! Nodes sharing a Redis prefix must share their store: a node whose store is
//! its own (SQLite in its data directory) is refused at start while another
//! node with another store is live there.

mod common;

use common::{node_dir, unique_name, Server};
use delayq_testkit::service;
use sqlx::Connection;

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
    let output = common::serve_until_exit(&second_dir, &second_env).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("delayq listening"), "a refused node never listens: {stdout}");
    let (started, stderr) = (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_one_database_start_together() {
    let (Some(redis_url), Some(mysql_url)) = (service("DELAYQ_TEST_REDIS_URL"), service("DELAYQ_TEST_MYSQL_URL"))
    else {
        return;
    };
    let name = unique_name("dq_e2e_nodes_shared");
    let database_url = common::fresh_database(&mysql_url, &name, None).await;
    let root = tempfile::tempdir().expect("tempdir");
    let mut nodes = Vec::new();
    for node in ["a", "b"] {
        let env = common::distributed_env(&redis_url, &database_url, &name, node);
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
