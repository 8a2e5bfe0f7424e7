//! The node registry against real Redis (`DELAYQ_TEST_REDIS_URL`, and the
//! cluster of `DELAYQ_TEST_REDIS_CLUSTER`): nodes on one prefix must share
//! their store. Store ids come from real SQLite stores on temporary files.

use std::sync::Arc;
use std::time::Duration;

use delayq_queue::redis::{JoinError, NodeRegistry, NodeRegistryOptions};
use delayq_queue::RedisScheduler;
use delayq_store::{JobStore, SqliteStore};
use delayq_testkit::service;
use tokio_util::sync::CancellationToken;

mod common;

use common::{connect, unique_prefix};

async fn sqlite_store() -> SqliteStore {
    SqliteStore::open_temp("node".into()).await.expect("open a temporary sqlite store")
}

fn registry(scheduler: &RedisScheduler, name: &str, store: &SqliteStore) -> NodeRegistry {
    scheduler.node_registry(name, store.store_id(), NodeRegistryOptions::default())
}

fn refused_by(outcome: Result<(), JoinError>) -> String {
    match outcome {
        Err(JoinError::ForeignStore(foreign)) => foreign.name,
        other => panic!("expected a refusal for a foreign store, got {other:?}"),
    }
}

/// A node with another store is refused, naming the node already there; a
/// node with the same store joins.
async fn stores_must_match(url: &str) {
    let prefix = unique_prefix();
    let (first_node, second_node, third_node) =
        (connect(url, &prefix).await, connect(url, &prefix).await, connect(url, &prefix).await);
    let (shared, own) = (sqlite_store().await, sqlite_store().await);
    assert_ne!(shared.store_id(), own.store_id());

    let first = registry(&first_node, "node-a", &shared);
    first.join().await.expect("the first node joins");
    let foreign = registry(&second_node, "node-b", &own);
    let refusal = foreign.join().await;
    let message = match &refusal {
        Err(error) => error.to_string(),
        Ok(()) => String::new(),
    };
    assert_eq!(refused_by(refusal), "node-a");
    assert!(message.contains("node-a") && message.contains("different store"), "{message}");
    assert_eq!(first.heartbeat().await.expect("heartbeat"), None, "a refused node leaves no entry");

    let same = registry(&third_node, "node-c", &shared);
    same.join().await.expect("a node with the same store joins");
    assert_eq!(same.heartbeat().await.expect("heartbeat"), None);
    for registry in [&first, &same] {
        registry.leave().await.expect("leave");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_store_is_refused() {
    let Some(url) = service("DELAYQ_TEST_REDIS_URL") else { return };
    stores_must_match(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_store_is_refused_in_a_cluster() {
    let Some(urls) = service("DELAYQ_TEST_REDIS_CLUSTER") else { return };
    stores_must_match(&urls).await;
}

/// Two nodes sharing a name are still two entries: the registry keys on the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_name_does_not_hide_another_store() {
    let Some(url) = service("DELAYQ_TEST_REDIS_URL") else { return };
    let prefix = unique_prefix();
    let (first_node, second_node) = (connect(&url, &prefix).await, connect(&url, &prefix).await);
    let (first_store, second_store) = (sqlite_store().await, sqlite_store().await);
    let first = registry(&first_node, "same-name", &first_store);
    first.join().await.expect("join");
    assert_eq!(refused_by(registry(&second_node, "same-name", &second_store).join().await), "same-name");
    first.leave().await.expect("leave");
}

/// An entry whose heartbeat is older than the expiry (a crashed node) does not
/// block, and is dropped; one that left does not block either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_nodes_do_not_block() {
    let Some(url) = service("DELAYQ_TEST_REDIS_URL") else { return };
    let prefix = unique_prefix();
    let (crashed_node, left_node, new_node) =
        (connect(&url, &prefix).await, connect(&url, &prefix).await, connect(&url, &prefix).await);
    let (crashed_store, left_store, new_store) = (sqlite_store().await, sqlite_store().await, sqlite_store().await);
    registry(&crashed_node, "crashed", &crashed_store).join().await.expect("join");
    let short = NodeRegistryOptions { heartbeat: Duration::from_millis(20), expiry: Duration::from_millis(100) };
    let newcomer = new_node.node_registry("new", new_store.store_id(), short);
    assert_eq!(refused_by(newcomer.join().await), "crashed", "a fresh heartbeat blocks");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = registry(&left_node, "left", &left_store);
    assert_eq!(refused_by(left.join().await), "crashed", "the default expiry still counts the node as live");
    newcomer.join().await.expect("past the expiry the crashed node no longer counts");
    newcomer.leave().await.expect("leave");
    left.join().await.expect("the crashed node's entry was dropped and the newcomer left");
    left.leave().await.expect("leave");
    newcomer.join().await.expect("a node that left does not block");
    newcomer.leave().await.expect("leave");
}

/// A node whose heartbeat stopped long enough for a foreign node to join sees
/// that node on its next heartbeat; the heartbeat task leaves when cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_report_a_foreign_store_and_stop_by_leaving() {
    let Some(url) = service("DELAYQ_TEST_REDIS_URL") else { return };
    let prefix = unique_prefix();
    let (late_node, foreign_node) = (connect(&url, &prefix).await, connect(&url, &prefix).await);
    let (late_store, foreign_store) = (sqlite_store().await, sqlite_store().await);
    let short = NodeRegistryOptions { heartbeat: Duration::from_millis(20), expiry: Duration::from_millis(100) };
    let late = late_node.node_registry("late", late_store.store_id(), short);
    late.join().await.expect("join");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let foreign = Arc::new(foreign_node.node_registry("foreign", foreign_store.store_id(), short));
    foreign.join().await.expect("the late node counts as gone");
    let seen = late.heartbeat().await.expect("heartbeat").expect("the foreign node is reported");
    assert_eq!(seen.name, "foreign");
    assert_eq!(seen.store_id, foreign_store.store_id().as_str());

    let cancel = CancellationToken::new();
    let beating = tokio::spawn(Arc::clone(&foreign).run_heartbeat(cancel.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        refused_by(late_node.node_registry("late-again", late_store.store_id(), short).join().await),
        "foreign",
        "heartbeats keep the node live past its expiry"
    );
    cancel.cancel();
    beating.await.expect("the heartbeat task ends");
    late.leave().await.expect("leave");
    late.join().await.expect("the cancelled heartbeat left the registry");
    late.leave().await.expect("leave");
}
