//! What the store's test files share: the checks each backend runs with a
//! store of its own making (retention, the journal's bound, commits shared by
//! concurrent inserts) and their small helpers.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_common::{JobState, Timestamp, Topic};
use delayq_store::testsuite::{
    change, counts_of, get_ok, history_states, insert_new_jobs, insert_ok, sample_job, unique_name, unique_topic,
};
use delayq_store::{JobStore, MysqlStore, StoreError, StoreOptions};
use tokio::task::JoinSet;

/// Opens a store named `node` on a database of its own, created on the
/// server of `url` and dropped when the store closes.
pub async fn open_scratch(url: &str, node: &str, options: StoreOptions) -> MysqlStore {
    match MysqlStore::open_scratch_with_options(url, node.into(), options).await {
        Ok(store) => store,
        Err(error) => panic!("open a scratch mysql store: {error:?}"),
    }
}

/// Returns the URL of the scratch database `store` works in, on the server of `url`.
pub fn scratch_url(url: &str, store: &MysqlStore) -> String {
    let name = store.scratch_database().expect("a scratch store");
    let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
    format!("{base}/{name}")
}

/// Waits until `done` holds, failing after `limit`.
pub async fn eventually<F: Future<Output = bool>>(what: &str, limit: Duration, mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The options of a store whose retention task purges jobs ended over an hour
/// ago, looking every 50 ms.
pub fn retention_options() -> StoreOptions {
    StoreOptions {
        retention: Some(Duration::from_secs(3_600)),
        purge_interval: Duration::from_millis(50),
        ..StoreOptions::default()
    }
}

/// The store's own task (`store` opened with [`retention_options`]) purges a
/// job that ended longer ago than the retention, with its history and its
/// count; a live job and a job that ended recently stay.
pub async fn check_retention_task_purges(store: &dyn JobStore, limit: Duration) {
    let (topic, jobs) = insert_new_jobs(store, "retention", 3).await;
    let [old, recent, live] = [&jobs[0], &jobs[1], &jobs[2]];
    let two_hours_ago = Timestamp::from_millis(Timestamp::now().as_millis() - 7_200_000);
    store
        .record(vec![change(old, JobState::Finished, two_hours_ago), change(recent, JobState::Dead, Timestamp::now())])
        .await
        .expect("record");

    eventually("the old job is purged", limit, || async { store.get(&old.id).await.expect("get").is_none() }).await;
    assert!(history_states(store, &old.id).await.is_empty(), "its history goes with it");
    assert_eq!(get_ok(store, &recent.id).await.state, JobState::Dead);
    assert_eq!(history_states(store, &recent.id).await, [JobState::Delay, JobState::Dead]);
    assert_eq!(get_ok(store, &live.id).await.state, JobState::Delay);
    let counts = counts_of(store, &topic).await;
    assert_eq!(counts, [(JobState::Delay, 1), (JobState::Dead, 1)], "the purged job left its count");
}

/// Inserts three live jobs of a topic of their own, one of them ready.
pub async fn three_live_jobs(store: &dyn JobStore) -> Topic {
    let (topic, live) = insert_new_jobs(store, "live", 3).await;
    store.record(vec![change(&live[0], JobState::Ready, Timestamp::now())]).await.expect("record");
    topic
}

/// Asserts the counts of [`three_live_jobs`] and of `ended` ended jobs of
/// `ended_topic`, a quarter in each ended state.
pub async fn assert_live_and_ended_counts(store: &dyn JobStore, live_topic: &Topic, ended_topic: &Topic, ended: u64) {
    assert_eq!(counts_of(store, live_topic).await, [(JobState::Delay, 2), (JobState::Ready, 1)]);
    let quarter = ended / 4;
    let ended_states = [JobState::Finished, JobState::Deleted, JobState::Dead, JobState::Expired];
    assert_eq!(counts_of(store, ended_topic).await, ended_states.map(|state| (state, quarter)));
}

/// The journal bound of the stores [`check_the_journal_is_bounded`] checks.
pub const JOURNAL_BOUND: usize = 20;

/// The options of a store whose journal holds up to [`JOURNAL_BOUND`] changes.
pub fn bounded_journal_options() -> StoreOptions {
    StoreOptions { journal_max: JOURNAL_BOUND, ..StoreOptions::default() }
}

/// While `block`'s blocker keeps the database from taking writes, journaled
/// changes wait in memory: once [`JOURNAL_BOUND`] of them wait, the store
/// (opened with [`bounded_journal_options`]) says it has no room, naming
/// `backend`, and the backlog stays put; once `release` lets the database take
/// writes again, the journal drains by itself within `drain_limit`.
pub async fn check_the_journal_is_bounded<Blocker, Blocked, Released>(
    store: &dyn JobStore,
    backend: &str,
    drain_limit: Duration,
    block: impl FnOnce() -> Blocked,
    release: impl FnOnce(Blocker) -> Released,
) where
    Blocked: Future<Output = Blocker>,
    Released: Future<Output = ()>,
{
    let (_, jobs) = insert_new_jobs(store, "bound", JOURNAL_BOUND).await;
    let blocker = block().await;
    for job in &jobs {
        store.check_journal_room().expect("room below the bound");
        store.journal(vec![change(job, JobState::Ready, Timestamp::now())]);
    }
    assert_eq!(store.journal_backlog(), JOURNAL_BOUND);
    let refused = store.check_journal_room();
    assert!(
        matches!(&refused, Err(StoreError::Unavailable { backend: named, .. }) if *named == backend),
        "{refused:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.journal_backlog(), JOURNAL_BOUND, "nothing committed, nothing added");
    assert!(store.check_journal_room().is_err());

    release(blocker).await;
    eventually("the journal drains", drain_limit, || async { store.journal_backlog() == 0 }).await;
    store.check_journal_room().expect("room again");
    for job in &jobs {
        assert_eq!(get_ok(store, &job.id).await.state, JobState::Ready);
    }
}

/// Fifty single inserts at once share commits (`commits` counts the
/// transactions of the store's writer).
pub async fn check_concurrent_single_inserts_share_commits<S: JobStore>(store: Arc<S>, commits: fn(&S) -> u64) {
    let topic = unique_topic("share");
    let before = commits(&store);
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let mut tasks = JoinSet::new();
    for _ in 0..50 {
        let (store, topic, barrier) = (Arc::clone(&store), topic.clone(), Arc::clone(&barrier));
        tasks.spawn(async move {
            barrier.wait().await;
            insert_ok(&*store, &sample_job(&unique_name("share"), &topic)).await;
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task");
    }
    let took = commits(&store) - before;
    assert!(took < 50, "50 concurrent inserts took {took} commits");
}

/// Prints how fast `rounds` batches of 1,000 inserts and then 10,000 single
/// inserts from 50 tasks go.
pub async fn print_insert_throughput<S: JobStore>(store: Arc<S>, rounds: usize, commits: fn(&S) -> u64) {
    let topic = unique_topic("bench");
    for round in 0..rounds {
        let jobs: Vec<_> = (0..1_000).map(|_| sample_job(&unique_name("bench-batch"), &topic)).collect();
        let started = Instant::now();
        let outcomes = store.insert(jobs).await.expect("insert");
        let elapsed = started.elapsed();
        assert!(outcomes.iter().all(Result::is_ok));
        println!("batch of 1000 inserts (round {round}): {elapsed:?}, {:.0} jobs/s", 1_000.0 / elapsed.as_secs_f64());
    }

    const TASKS: usize = 50;
    const PER_TASK: usize = 200;
    let commits_before = commits(&store);
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..TASKS {
        let (store, topic) = (Arc::clone(&store), topic.clone());
        tasks.spawn(async move {
            for _ in 0..PER_TASK {
                insert_ok(&*store, &sample_job(&unique_name("bench-single"), &topic)).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task");
    }
    let elapsed = started.elapsed();
    let total = TASKS * PER_TASK;
    let took = commits(&store) - commits_before;
    println!(
        "{total} single inserts from {TASKS} tasks: {elapsed:?}, {:.0} jobs/s, {took} commits ({:.1} inserts/commit)",
        total as f64 / elapsed.as_secs_f64(),
        total as f64 / took.max(1) as f64
    );
}
