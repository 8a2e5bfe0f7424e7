//! The registry of consumers across nodes: two nodes over one shared
//! scheduler each list the consumers of both, with the node each polls and
//! the jobs it holds; a node whose consumers all went silent drops out.
//!
//! Runs on Redis and on Redis Cluster when the services are set; the
//! in-process scheduler serves one node, and lists that node's own.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{ConsumerName, Snowflake, Topic};
use delayq_queue::{ConsumerKey, DelayQueue, MemoryScheduler, QueueSettings, Scheduler};
use delayq_store::{JobStore, SqliteStore};

mod common;

fn node(scheduler: Arc<dyn Scheduler>, store: Arc<dyn JobStore>, name: &str, forget_after: Duration) -> DelayQueue {
    let settings =
        QueueSettings { node: name.to_owned(), forget_consumers_after: forget_after, ..QueueSettings::default() };
    DelayQueue::new(scheduler, store, Snowflake::new(3), settings)
}

fn consumer(name: &str, topic: &Topic) -> ConsumerKey {
    ConsumerKey { consumer: ConsumerName::parse(name).expect("name"), topic: topic.clone(), group: None }
}

/// Two nodes over `scheduler` (one shared store, as a deployment has).
async fn two_nodes(
    scheduler: Arc<dyn Scheduler>,
    forget_after: Duration,
) -> (DelayQueue, DelayQueue, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn JobStore> =
        Arc::new(SqliteStore::open_in(dir.path(), "consumers".to_owned()).await.expect("sqlite"));
    let a = node(Arc::clone(&scheduler), Arc::clone(&store), "node-a", forget_after);
    let b = node(scheduler, store, "node-b", forget_after);
    (a, b, dir)
}

async fn check_nodes_list_each_others_consumers(name: &str, scheduler: Arc<dyn Scheduler>) {
    let (a, b, _dir) = two_nodes(scheduler, Duration::from_secs(60)).await;
    let topic = common::topic(&format!("consumers.{}", common::unique_prefix().replace([':', '-'], "_")));
    a.push(common::push_request(&topic, None, "x".to_owned(), Duration::ZERO)).await.expect("push");
    let popped = a
        .pop_for(Some(&consumer("worker-a", &topic).consumer), &topic, None, 1, Duration::from_secs(5))
        .await
        .expect("pop");
    assert_eq!(popped.len(), 1, "{name}");
    b.heartbeat(&consumer("worker-b", &topic));

    // Each node publishes when it lists; b then sees a's consumer, and a sees b's.
    a.consumers().await.expect("a lists");
    let seen_by_b = b.consumers().await.expect("b lists");
    let mine: Vec<(String, String, u64)> = seen_by_b
        .iter()
        .filter(|view| view.key.topic == topic)
        .map(|view| (view.key.consumer.to_string(), view.node.clone(), view.in_flight))
        .collect();
    assert_eq!(
        mine,
        [("worker-a".to_owned(), "node-a".to_owned(), 1), ("worker-b".to_owned(), "node-b".to_owned(), 0)],
        "{name}"
    );
    let seen_by_a = a.consumers().await.expect("a lists");
    assert_eq!(seen_by_a.iter().filter(|view| view.key.topic == topic).count(), 2, "{name}");

    a.finish(&popped[0].id, None, None).await.expect("finish");
    a.consumers().await.expect("a publishes");
    let after = b.consumers().await.expect("b lists");
    let worker_a = after.iter().find(|view| view.key.consumer.as_str() == "worker-a").expect("listed");
    assert_eq!(worker_a.in_flight, 0, "{name}: the finish through a reached b's list");
    a.close().await;
    b.close().await;
}

/// A consumer silent for `forget_after` is forgotten; with a `shared`
/// scheduler, the other node (which lists it through the scheduler) forgets it too.
async fn check_silent_consumers_drop_out(name: &str, scheduler: Arc<dyn Scheduler>, shared: bool) {
    let forget_after = Duration::from_millis(300);
    let (a, other, _dir) = two_nodes(scheduler, forget_after).await;
    let b = if shared { &other } else { &a };
    let topic = common::topic(&format!("silent.{}", common::unique_prefix().replace([':', '-'], "_")));
    a.heartbeat(&consumer("short-lived", &topic));
    a.consumers().await.expect("a publishes");
    let listed = |views: &[delayq_queue::ConsumerView]| views.iter().filter(|view| view.key.topic == topic).count();
    assert_eq!(listed(&b.consumers().await.expect("b lists")), 1, "{name}");
    tokio::time::sleep(forget_after + Duration::from_millis(200)).await;
    assert_eq!(listed(&b.consumers().await.expect("b lists")), 0, "{name}: forgotten after its silence");
    assert_eq!(listed(&a.consumers().await.expect("a lists")), 0, "{name}");
    a.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_list_each_others_consumers() {
    if let Some(url) = delayq_testkit::service("DELAYQ_TEST_REDIS_URL") {
        let scheduler = Arc::new(common::connect(&url, &common::unique_prefix()).await);
        check_nodes_list_each_others_consumers("redis", scheduler).await;
    }
    if let Some(url) = delayq_testkit::service("DELAYQ_TEST_REDIS_CLUSTER") {
        let scheduler = Arc::new(common::connect(&url, &common::unique_prefix()).await);
        check_nodes_list_each_others_consumers("redis cluster", scheduler).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_consumers_and_their_nodes_drop_out() {
    check_silent_consumers_drop_out("memory", Arc::new(MemoryScheduler::new()), false).await;
    if let Some(url) = delayq_testkit::service("DELAYQ_TEST_REDIS_URL") {
        let scheduler = Arc::new(common::connect(&url, &common::unique_prefix()).await);
        check_silent_consumers_drop_out("redis", scheduler, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_over_its_own_scheduler_lists_its_own() {
    let (a, b, _dir) = two_nodes(Arc::new(MemoryScheduler::new()), Duration::from_secs(60)).await;
    let topic = common::topic("own");
    a.heartbeat(&consumer("w", &topic));
    let views = a.consumers().await.expect("lists");
    assert_eq!(views.iter().map(|view| view.node.as_str()).collect::<Vec<_>>(), ["node-a"]);
    // Two services over one in-process scheduler are two processes' worth: no sharing.
    assert!(b.consumers().await.expect("lists").is_empty());
    a.close().await;
    b.close().await;
}
