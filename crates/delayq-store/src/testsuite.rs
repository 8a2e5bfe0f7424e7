//! The conformance suite every [`JobStore`] backend runs.
//!
//! Each `check_*` function is one behaviour of the [`JobStore`] contract. The
//! checks are written for a database shared with other checks and other test
//! processes running at the same time (MySQL in CI): each uses its own ids and
//! topics, never assumes an empty table and never asserts a global count.
//!
//! A backend runs the suite with [`store_conformance!`](crate::store_conformance),
//! one `#[tokio::test]` per check plus one that runs them all at once on one store.
//!
//! [`check_delete_all_live`] is the exception: it deletes every live job of the
//! database, other checks' included, so it is not in the macro. Run it on a
//! database of its own (SQLite: a fresh file; MySQL: a dedicated schema).
//! [`check_store_id_follows_the_database`] is not in it either: it opens
//! several stores on one database, which each backend does its own way.
//!
//! `DELAYQ_TEST_REQUIRE_SERVICES=1` turns a skipped backend into a failure.

use std::time::Duration;

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
// What `store_conformance!` expands to, reached through this crate so that a
// crate running the suite needs no dependency of its own on the testkit.
#[doc(hidden)]
pub use delayq_testkit::conformance_tests;
pub use delayq_testkit::{job_id, unique_name};

use crate::store::{JobStore, ListCursor, StateChange, StoreError};

mod bounds;
mod groups;
mod identity;
mod outage;
mod reads;
mod writes;

pub use bounds::*;
pub use groups::*;
pub use identity::*;
pub use outage::SqliteWriteLock;
pub use reads::*;
pub use writes::*;

/// Expands to one `#[tokio::test]` per shared-safe check, given an expression
/// of type `impl Future<Output = Option<Arc<dyn JobStore>>>` evaluated once per
/// test (`None`: the backend is not configured; the test is skipped, as
/// [`delayq_testkit::skip`] says). Each test closes its store when its check ends.
///
/// ```ignore
/// async fn sqlite_store() -> Option<Arc<dyn JobStore>> { ... }
/// delayq_store::store_conformance!(sqlite_store());
/// ```
#[macro_export]
macro_rules! store_conformance {
    ($factory:expr) => {
        $crate::testsuite::conformance_tests! {
            suite: $crate::testsuite,
            backend: store = $factory,
            worker_threads: 4,
            after: { store.close().await },
            checks: [
                check_insert_get_round_trip,
                check_get_many,
                check_duplicate_live_id_is_refused,
                check_insert_over_ended_job_continues_history,
                check_history_order_within_a_batch,
                check_biz_key_unique_among_live_jobs,
                check_replace,
                check_record_and_history_in_order,
                check_ended_jobs_never_move,
                check_live_jobs_never_go_back,
                check_changes_of_a_job_within_one_write,
                check_results_within_one_write,
                check_journal_is_ordered_with_durable_writes,
                check_list_orders_and_pages,
                check_live_jobs_page_by_due_time,
                check_far_jobs_page_by_coarse_bucket,
                check_count_live_due,
                check_pause_and_resume_topics,
                check_job_groups_round_trip,
                check_declare_and_drop_groups,
                check_deliveries_of_a_job,
                check_longest_delivery_names_round_trip,
                check_deliveries_are_bounded,
                check_queued_insert_comes_before_later_writes,
                check_journaled_insert_takes_its_changes_along,
                check_purge_dead_of_a_topic,
                check_counts,
                check_counts_follow_every_change,
                check_purge_ended,
                check_history_returns_the_newest_lines,
                check_concurrent_inserts_are_durable,
                check_batch_with_refused_items,
                check_ping_and_empty_writes,
                check_all_concurrently,
            ],
        }
    };
}

/// A history limit above any history the checks make: their whole history.
pub const ALL_HISTORY: usize = 10_000;

/// Returns a plain job ([`delayq_testkit::job_created_at`]), created now and
/// due in a minute.
pub fn sample_job(id: &str, topic: &Topic) -> Job {
    let now = Timestamp::now();
    delayq_testkit::job_created_at(id, topic, now, now.plus(Duration::from_secs(60)))
}

/// Returns a topic of its own for one check.
pub fn unique_topic(prefix: &str) -> Topic {
    delayq_testkit::topic(&unique_name(prefix))
}

/// Returns `job` moved to `state` at `at`, as a [`StateChange`].
pub fn change(job: &Job, state: JobState, at: Timestamp) -> StateChange {
    StateChange { id: job.id.clone(), state, attempt: job.attempt, run_at: job.run_at, at, result: None }
}

/// Inserts one job that must be accepted.
pub async fn insert_ok(store: &dyn JobStore, job: &Job) {
    let outcomes = store.insert(vec![job.clone()]).await.unwrap_or_else(|error| panic!("insert {}: {error}", job.id));
    assert_eq!(outcomes.len(), 1, "one outcome per job");
    if let Some(Err(refused)) = outcomes.first() {
        panic!("insert {} refused: {refused}", job.id);
    }
}

/// Inserts `jobs` in one call; each must be accepted.
pub async fn insert_all_ok(store: &dyn JobStore, jobs: &[Job]) {
    let outcomes = store.insert(jobs.to_vec()).await.unwrap_or_else(|error| panic!("insert: {error}"));
    assert_eq!(outcomes.len(), jobs.len(), "one outcome per job");
    assert!(outcomes.iter().all(Result::is_ok), "every job is accepted: {outcomes:?}");
}

/// Inserts `count` jobs named after `name`, of a topic of their own, in one
/// call; each must be accepted.
pub async fn insert_new_jobs(store: &dyn JobStore, name: &str, count: usize) -> (Topic, Vec<Job>) {
    let topic = unique_topic(name);
    let jobs: Vec<Job> = (0..count).map(|_| sample_job(&unique_name(name), &topic)).collect();
    insert_all_ok(store, &jobs).await;
    (topic, jobs)
}

/// Records, at `at`, each job's move to its state, in one durable write.
pub async fn record_moves(store: &dyn JobStore, at: Timestamp, moves: &[(&Job, JobState)]) {
    let changes = moves.iter().map(|&(job, state)| change(job, state, at)).collect();
    store.record(changes).await.unwrap_or_else(|error| panic!("record: {error}"));
}

/// Returns the stored job, which must exist.
pub async fn get_ok(store: &dyn JobStore, id: &JobId) -> Job {
    match store.get(id).await {
        Ok(Some(job)) => job,
        Ok(None) => panic!("job {id} is missing"),
        Err(error) => panic!("get {id}: {error}"),
    }
}

/// Returns the states of a job's history, oldest first.
pub async fn history_states(store: &dyn JobStore, id: &JobId) -> Vec<JobState> {
    let history = store.history(id, ALL_HISTORY).await.unwrap_or_else(|error| panic!("history {id}: {error}"));
    history.into_iter().map(|entry| entry.state).collect()
}

/// Pages through `list` with page size `page`; returns the ids in order.
pub async fn list_all(store: &dyn JobStore, topic: &Topic, state: JobState, page: usize) -> Vec<JobId> {
    let mut ids = Vec::new();
    let mut cursor: Option<ListCursor> = None;
    loop {
        let jobs =
            store.list(topic, state, page, cursor.as_ref()).await.unwrap_or_else(|error| panic!("list: {error}"));
        assert!(jobs.len() <= page, "a page holds at most `limit` jobs");
        if let (Some(cursor), Some(first)) = (&cursor, jobs.first()) {
            assert!((first.run_at, &first.id) > (cursor.run_at, &cursor.id), "a page starts strictly after its cursor");
        }
        let Some(last) = jobs.last() else { break };
        cursor = Some(ListCursor { run_at: last.run_at, id: last.id.clone() });
        let full = jobs.len() == page;
        ids.extend(jobs.into_iter().map(|job| job.id));
        if !full {
            break;
        }
    }
    ids
}

/// Asserts that `outcome` is the refusal `expected` names.
pub fn assert_refused(outcome: &Result<(), StoreError>, expected: &str) {
    let matches = matches!(
        (outcome, expected),
        (Err(StoreError::IdTaken(_)), "IdTaken")
            | (Err(StoreError::BizKeyTaken { .. }), "BizKeyTaken")
            | (Err(StoreError::NotFound(_)), "NotFound")
    );
    assert!(matches, "expected {expected}, got {outcome:?}");
}
