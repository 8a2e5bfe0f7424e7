//! The journal's bound as callers of `DelayQueue` see it: while the database
//! takes no writes and the journal is full, pops and timer rounds refuse with
//! the store's unavailable error and the journal does not grow; once the
//! database takes writes again the journal drains and pops resume.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{ErrorKind, JobState, Snowflake, Timestamp, Topic};
use delayq_queue::{DelayQueue, MemoryScheduler, QueueSettings};
use delayq_store::sqlite::DATABASE_FILE_NAME;
use delayq_store::testsuite::SqliteWriteLock;
use delayq_store::{SqliteStore, StoreOptions};
use delayq_testkit::eventually;

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pops_and_timer_rounds_refuse_while_the_journal_is_full() {
    const BOUND: usize = 3;
    let dir = tempfile::tempdir().expect("temp dir");
    let options = StoreOptions { journal_max: BOUND, ..StoreOptions::default() };
    let store = SqliteStore::open_in_with_options(dir.path(), "node".into(), options).await.expect("store");
    let queue =
        DelayQueue::new(Arc::new(MemoryScheduler::new()), Arc::new(store), Snowflake::new(3), QueueSettings::default());
    let topic = Topic::parse(format!("journal.bound-{}", std::process::id())).expect("topic");
    for _ in 0..10 {
        queue.push(common::push_request(&topic, None, "b".into(), Duration::ZERO)).await.expect("push");
    }
    queue.promote_due(Timestamp::now()).await.expect("a timer round");
    queue.store().flush().await.expect("flush");
    assert_eq!(queue.store().journal_backlog(), 0);

    let lock = SqliteWriteLock::take(&dir.path().join(DATABASE_FILE_NAME)).await;
    for _ in 0..BOUND {
        assert_eq!(queue.pop(&topic, 1, Duration::ZERO).await.expect("pop while there is room").len(), 1);
    }
    assert_eq!(queue.store().journal_backlog(), BOUND, "each pop journaled its reservation");
    for _ in 0..20 {
        let refused = queue.pop(&topic, 1, Duration::ZERO).await.expect_err("the journal is full");
        assert_eq!(refused.kind(), ErrorKind::Unavailable);
        assert!(refused.to_string().contains("sqlite"), "names the store: {refused}");
    }
    let skipped = queue.promote_due(Timestamp::now()).await.expect_err("a timer round is skipped");
    assert_eq!(skipped.kind(), ErrorKind::Unavailable);
    assert_eq!(queue.store().journal_backlog(), BOUND, "the journal did not grow");
    let ready: u64 = queue.scheduler().stats().await.expect("stats").iter().map(|topic| topic.ready).sum();
    assert_eq!(ready, 10 - BOUND as u64, "refused pops reserved nothing");

    lock.release().await;
    let drained = eventually(Duration::from_secs(20), || async { queue.store().journal_backlog() == 0 }).await;
    assert!(drained, "the journal drains once the database takes writes");
    let popped = queue.pop(&topic, 1, Duration::ZERO).await.expect("pops resume");
    assert_eq!(popped.len(), 1);
    queue.store().flush().await.expect("flush");
    let stored = queue.store().get(&popped[0].id).await.expect("get").expect("stored");
    assert_eq!(stored.state, JobState::Reserved);
    queue.close().await;
}
