//! What keeps the SQLite store bounded: the retention task, counts that read no
//! ended row, and the journal's bound while the database refuses writes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_common::{JobState, Timestamp};
use delayq_store::sqlite::{COUNTS_QUERY, DATABASE_FILE_NAME};
use delayq_store::testsuite::{change, get_ok, history_states, insert_ok, sample_job, unique_name, unique_topic};
use delayq_store::{JobStore, SqliteStore, StoreError, StoreOptions};
use sqlx::{Connection, SqliteConnection};

async fn connect_to(dir: &tempfile::TempDir) -> SqliteConnection {
    let url = format!("sqlite://{}", dir.path().join(DATABASE_FILE_NAME).display());
    SqliteConnection::connect(&url).await.expect("connect")
}

/// Waits until `done` holds, failing after `limit`.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, limit: Duration, mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The store's own task purges a job that ended longer ago than the retention,
/// with its history; a live job and a job that ended recently stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_task_purges_jobs_ended_before_the_retention() {
    let options = StoreOptions {
        retention: Some(Duration::from_secs(3_600)),
        purge_interval: Duration::from_millis(50),
        ..StoreOptions::default()
    };
    let store = SqliteStore::open_temp_with_options("node".into(), options).await.expect("open");
    let topic = unique_topic("retention");
    let [old, recent, live] = ["old", "recent", "live"].map(|name| sample_job(&unique_name(name), &topic));
    for job in [&old, &recent, &live] {
        insert_ok(&store, job).await;
    }
    let two_hours_ago = Timestamp::from_millis(Timestamp::now().as_millis() - 7_200_000);
    store
        .record(vec![
            change(&old, JobState::Finished, two_hours_ago),
            change(&recent, JobState::Dead, Timestamp::now()),
        ])
        .await
        .expect("record");

    eventually("the old job is purged", Duration::from_secs(10), || async {
        store.get(&old.id).await.expect("get").is_none()
    })
    .await;
    assert!(history_states(&store, &old.id).await.is_empty(), "its history goes with it");
    assert_eq!(get_ok(&store, &recent.id).await.state, JobState::Dead);
    assert_eq!(history_states(&store, &recent.id).await, [JobState::Delay, JobState::Dead]);
    assert_eq!(get_ok(&store, &live.id).await.state, JobState::Delay);
    store.close().await;
}

/// With 200,000 ended rows and three live ones, the counts query reads the
/// index of live rows and the table of ended counts, never the ended rows, and
/// its counts are right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_read_no_ended_row() {
    const ENDED: u64 = 200_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open_in(dir.path(), "node".into()).await.expect("open");
    let live_topic = unique_topic("live");
    let live: Vec<_> = (0..3).map(|_| sample_job(&unique_name("live"), &live_topic)).collect();
    assert!(store.insert(live.clone()).await.expect("insert").iter().all(Result::is_ok));
    store.record(vec![change(&live[0], JobState::Ready, Timestamp::now())]).await.expect("record");

    let ended_topic = unique_topic("ended");
    let mut connection = connect_to(&dir).await;
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
         INSERT INTO job (id, topic, delay, create_time, body, status, update_time, run_at, ttr, priority, \
         attempt, max_retries) \
         SELECT 'ended-' || i, ?2, 0, 0, 'b', \
         CASE i % 4 WHEN 0 THEN 'finished' WHEN 1 THEN 'deleted' WHEN 2 THEN 'dead' ELSE 'expired' END, \
         i, i, 30000, 1, 1, 3 FROM n",
    )
    .bind(ENDED as i64)
    .bind(ended_topic.as_str())
    .execute(&mut connection)
    .await
    .expect("bulk insert of ended rows");

    let plan: Vec<(i64, i64, i64, String)> =
        sqlx::query_as(&format!("EXPLAIN QUERY PLAN {COUNTS_QUERY}")).fetch_all(&mut connection).await.expect("plan");
    let steps: Vec<&str> = plan.iter().map(|(_, _, _, detail)| detail.as_str()).collect();
    assert!(steps.iter().any(|step| step.contains("COVERING INDEX job_live_idx")), "{steps:?}");
    assert!(steps.iter().any(|step| step.contains("job_ended_count")), "{steps:?}");
    for step in &steps {
        let reads_job_otherwise = step.contains(" job ") || step.ends_with(" job");
        assert!(!reads_job_otherwise || step.contains("job_live_idx"), "a step reads ended rows: {step} in {steps:?}");
    }

    let counts = store.counts().await.expect("counts");
    let of = |topic: &delayq_common::Topic| {
        let mut mine: Vec<(JobState, u64)> =
            counts.iter().filter(|count| &count.topic == topic).map(|count| (count.state, count.count)).collect();
        mine.sort();
        mine
    };
    assert_eq!(of(&live_topic), [(JobState::Delay, 2), (JobState::Ready, 1)]);
    let quarter = ENDED / 4;
    assert_eq!(
        of(&ended_topic),
        [
            (JobState::Finished, quarter),
            (JobState::Deleted, quarter),
            (JobState::Dead, quarter),
            (JobState::Expired, quarter)
        ]
    );
    connection.close().await.expect("close");
    store.close().await;
}

/// While another connection holds the write lock, journaled changes wait in
/// memory: once `journal_max` of them wait, the store says it has no room
/// (naming sqlite) and the backlog stays put; when the lock goes, the journal
/// drains by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_bounded_while_the_database_refuses_writes() {
    const BOUND: usize = 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let options = StoreOptions { journal_max: BOUND, ..StoreOptions::default() };
    let store = SqliteStore::open_in_with_options(dir.path(), "node".into(), options).await.expect("open");
    let topic = unique_topic("bound");
    let jobs: Vec<_> = (0..BOUND).map(|_| sample_job(&unique_name("bound"), &topic)).collect();
    assert!(store.insert(jobs.clone()).await.expect("insert").iter().all(Result::is_ok));
    store.check_journal_room().expect("room");

    let mut blocker = connect_to(&dir).await;
    sqlx::query("BEGIN IMMEDIATE").execute(&mut blocker).await.expect("take the write lock");
    for job in &jobs {
        store.check_journal_room().expect("room below the bound");
        store.journal(vec![change(job, JobState::Ready, Timestamp::now())]);
    }
    assert_eq!(store.journal_backlog(), BOUND);
    let refused = store.check_journal_room();
    assert!(matches!(refused, Err(StoreError::Unavailable { backend: "sqlite", .. })), "{refused:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.journal_backlog(), BOUND, "nothing committed, nothing added");
    assert!(store.check_journal_room().is_err());

    sqlx::query("ROLLBACK").execute(&mut blocker).await.expect("release the write lock");
    eventually("the journal drains", Duration::from_secs(20), || async { store.journal_backlog() == 0 }).await;
    store.check_journal_room().expect("room again");
    for job in &jobs {
        assert_eq!(get_ok(&store, &job.id).await.state, JobState::Ready);
    }
    blocker.close().await.expect("close");
    store.close().await;
}

/// A store without retention never purges.
#[tokio::test]
async fn without_retention_nothing_is_purged_by_itself() {
    let options = StoreOptions { purge_interval: Duration::from_millis(20), ..StoreOptions::default() };
    let store: Arc<dyn JobStore> =
        Arc::new(SqliteStore::open_temp_with_options("node".into(), options).await.expect("open"));
    let topic = unique_topic("forever");
    let job = sample_job(&unique_name("forever"), &topic);
    insert_ok(&*store, &job).await;
    store.record(vec![change(&job, JobState::Finished, Timestamp::from_millis(1))]).await.expect("record");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get_ok(&*store, &job.id).await.state, JobState::Finished);
    store.close().await;
}
