//! A paused topic: its jobs fall due but nothing hands them out, on the node
//! that paused it, on another node over the same store within a second, and
//! on a node started after the pause; resumed, they are handed out again.
//! On SQLite, and on MariaDB when `DELAYQ_TEST_MYSQL_URL` is set.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::Snowflake;
use delayq_queue::{DelayQueue, MemoryScheduler, QueueSettings, Scheduler};
use delayq_store::{JobStore, MysqlStore, SqliteStore};

mod common;

fn node(store: &Arc<dyn JobStore>, scheduler: &Arc<dyn Scheduler>) -> DelayQueue {
    DelayQueue::new(Arc::clone(scheduler), Arc::clone(store), Snowflake::new(5), QueueSettings::default())
}

async fn check_pause_holds_across_nodes_and_restarts(name: &str, store: Arc<dyn JobStore>) {
    let scheduler: Arc<dyn Scheduler> = Arc::new(MemoryScheduler::new());
    let (a, b) = (node(&store, &scheduler), node(&store, &scheduler));
    let topic = common::topic(&format!("paused.{}", common::unique_prefix().replace([':', '-'], "_")));
    a.push(common::push_request(&topic, None, "x".to_owned(), Duration::ZERO)).await.expect("push");
    assert!(b.paused_topics().await.is_empty(), "{name}: b read the list before the pause");

    a.pause(&topic).await.expect("pause");
    assert!(a.pop(&topic, 1, Duration::ZERO).await.expect("pop").is_empty(), "{name}: paused here at once");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(b.pop(&topic, 1, Duration::ZERO).await.expect("pop").is_empty(), "{name}: and on b within a second");
    let started = node(&store, &scheduler);
    assert!(started.paused_topics().await.contains(&topic), "{name}: a node started later reads the pause");

    b.resume(&topic).await.expect("resume");
    let popped = b.pop(&topic, 1, Duration::ZERO).await.expect("pop");
    assert_eq!(popped.len(), 1, "{name}: handed out once resumed");
    for queue in [a, b, started] {
        queue.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_across_nodes_and_restarts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite: Arc<dyn JobStore> =
        Arc::new(SqliteStore::open_in(dir.path(), "paused".to_owned()).await.expect("sqlite"));
    check_pause_holds_across_nodes_and_restarts("sqlite", sqlite).await;
    if let Some(url) = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL") {
        let mysql: Arc<dyn JobStore> =
            Arc::new(MysqlStore::open_scratch(&url, "paused".to_owned()).await.expect("mysql"));
        check_pause_holds_across_nodes_and_restarts("mysql", mysql).await;
    }
}
