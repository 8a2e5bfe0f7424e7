//! What keeps the SQLite store bounded: the retention task, counts that read no
//! ended row, and the journal's bound while the database refuses writes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    assert_live_and_ended_counts, bounded_journal_options, check_retention_task_purges, check_the_journal_is_bounded,
    retention_options, three_live_jobs,
};
use delayq_common::{JobState, Timestamp};
use delayq_store::sqlite::{COUNTS_QUERY, DATABASE_FILE_NAME};
use delayq_store::testsuite::{change, get_ok, insert_ok, sample_job, unique_name, unique_topic, SqliteWriteLock};
use delayq_store::{JobStore, SqliteStore, StoreOptions};
use sqlx::{Connection, SqliteConnection};

async fn connect_to(dir: &tempfile::TempDir) -> SqliteConnection {
    let url = format!("sqlite://{}", dir.path().join(DATABASE_FILE_NAME).display());
    SqliteConnection::connect(&url).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_task_purges_jobs_ended_before_the_retention() {
    let store = SqliteStore::open_temp_with_options("node".into(), retention_options()).await.expect("open");
    check_retention_task_purges(&store, Duration::from_secs(10)).await;
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
    let live_topic = three_live_jobs(&store).await;

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

    assert_live_and_ended_counts(&store, &live_topic, &ended_topic, ENDED).await;
    connection.close().await.expect("close");
    store.close().await;
}

/// While another connection holds the write lock, the journal fills up to its
/// bound and waits; when the lock goes, it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_bounded_while_the_database_refuses_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store =
        SqliteStore::open_in_with_options(dir.path(), "node".into(), bounded_journal_options()).await.expect("open");
    let database = dir.path().join(DATABASE_FILE_NAME);
    let take_the_write_lock = || SqliteWriteLock::take(&database);
    let drain_limit = Duration::from_secs(20);
    check_the_journal_is_bounded(&store, "sqlite", drain_limit, take_the_write_lock, SqliteWriteLock::release).await;
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
