//! What keeps the MySQL store bounded: the retention task, counts that read no
//! ended row, and the journal's bound while the database does not take writes.
//! Against the server of `DELAYQ_TEST_MYSQL_URL`, each test in a database of
//! its own; without the variable the tests print "skipped" and pass.

mod common;

use std::time::Duration;

use common::{
    assert_live_and_ended_counts, bounded_journal_options, check_retention_task_purges, check_the_journal_is_bounded,
    open_scratch, retention_options, scratch_url, three_live_jobs,
};
use delayq_store::mysql::{COUNTS_QUERY, LIVE_JOBS_DUE_QUERY};
use delayq_store::testsuite::unique_topic;
use delayq_store::{JobStore, MysqlStore, StoreOptions};
use serde_json::Value;
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, Row};

/// A connection of its own to the scratch database of `store`.
async fn connect_to(url: &str, store: &MysqlStore) -> MySqlConnection {
    MySqlConnection::connect(&scratch_url(url, store)).await.expect("connect")
}

/// Every object of an `EXPLAIN FORMAT=JSON` document that describes table `name`.
fn tables_named<'v>(plan: &'v Value, name: &str, found: &mut Vec<&'v Value>) {
    match plan {
        Value::Object(fields) => {
            if fields.get("table_name").and_then(Value::as_str) == Some(name) {
                found.push(plan);
            }
            fields.values().for_each(|value| tables_named(value, name, found));
        }
        Value::Array(values) => values.iter().for_each(|value| tables_named(value, name, found)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_task_purges_jobs_ended_before_the_retention() {
    let Some(url) = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL") else { return };
    let store = open_scratch(&url, "node", retention_options()).await;
    check_retention_task_purges(&store, Duration::from_secs(15)).await;
    store.close().await;
}

/// With 200,000 ended rows and three live ones, the counts query uses the index
/// of live rows, reads a number of rows that follows the live ones (the
/// server's handler counters), and its counts are right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_read_no_ended_row() {
    const ENDED: u64 = 200_000;
    /// Row reads allowed for three live jobs, a few count rows and the sorts.
    const READ_BOUND: u64 = 1_000;
    let Some(url) = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL") else { return };
    let store = open_scratch(&url, "node", StoreOptions::default()).await;
    let live_topic = three_live_jobs(&store).await;

    // Rows written behind the writer's back: their counts are added as the
    // writer would have added them.
    let ended_topic = unique_topic("ended");
    let mut connection = connect_to(&url, &store).await;
    sqlx::query(&format!(
        "INSERT INTO job (id, topic, delay, create_time, body, status, update_time, run_at, ttr, priority, \
         attempt, max_retries, retry_backoff) \
         SELECT CONCAT('ended-', seq), ?, 0, 0, 'b', ELT(seq % 4 + 1, 'finished', 'deleted', 'dead', 'expired'), \
         seq, seq, 30000, 1, 1, 3, '[]' FROM seq_1_to_{ENDED}"
    ))
    .bind(ended_topic.as_str())
    .execute(&mut connection)
    .await
    .expect("bulk insert of ended rows");
    sqlx::query(
        "INSERT INTO job_ended_count (topic, status, jobs) \
         SELECT topic, status, COUNT(*) FROM job WHERE topic = ? GROUP BY topic, status",
    )
    .bind(ended_topic.as_str())
    .execute(&mut connection)
    .await
    .expect("count them");

    let plan: String = sqlx::query(&format!("EXPLAIN FORMAT=JSON {COUNTS_QUERY}"))
        .fetch_one(&mut connection)
        .await
        .expect("explain")
        .try_get(0)
        .expect("the plan");
    let plan: Value = serde_json::from_str(&plan).expect("a JSON plan");
    let mut jobs = Vec::new();
    tables_named(&plan, "job", &mut jobs);
    assert_eq!(jobs.len(), 1, "{plan}");
    assert_eq!(jobs[0]["key"], "job_live_idx", "{plan}");
    let estimated = jobs[0]["rows"].as_u64().unwrap_or(u64::MAX);
    assert!(estimated < READ_BOUND, "the plan expects {estimated} rows: {plan}");

    sqlx::query("FLUSH STATUS").execute(&mut connection).await.expect("flush status");
    let rows = sqlx::query(COUNTS_QUERY).fetch_all(&mut connection).await.expect("counts");
    let total = rows_read(&mut connection).await;
    assert!(total < READ_BOUND, "the counts read {total} rows and index entries");
    assert!(rows.len() >= 6);

    assert_live_and_ended_counts(&store, &live_topic, &ended_topic, ENDED).await;
    connection.close().await.expect("close");
    store.close().await;
}

/// The rows and index entries the session of `connection` has read since its
/// last `FLUSH STATUS` (the server's handler counters), counting the entries an
/// index condition turned away inside the engine, which no `Handler_read` counts.
async fn rows_read(connection: &mut MySqlConnection) -> u64 {
    let reads: Vec<(String, String)> = sqlx::query_as(
        "SELECT VARIABLE_NAME, CAST(VARIABLE_VALUE AS CHAR) FROM information_schema.SESSION_STATUS \
         WHERE VARIABLE_NAME LIKE 'HANDLER_READ%' OR VARIABLE_NAME = 'HANDLER_ICP_ATTEMPTS'",
    )
    .fetch_all(&mut *connection)
    .await
    .expect("handler counters");
    reads.iter().filter_map(|(_, value)| value.parse::<u64>().ok()).sum()
}

/// A restore and the horizon loader read the live jobs in pages by due time
/// after a cursor: a page far into 100,000 live jobs of 100-byte bodies reads
/// about a page of rows, not every live row before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_live_jobs_by_due_time_reads_about_one_page_wherever_it_starts() {
    const LIVE: u64 = 100_000;
    const PAGE: i64 = 1_000;
    /// Row reads allowed for a page of 1,000, a restore's (index entries, their rows, the seek).
    const READ_BOUND: u64 = 5_000;
    let Some(url) = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL") else { return };
    let store = open_scratch(&url, "node", StoreOptions::default()).await;
    let mut connection = connect_to(&url, &store).await;
    sqlx::query(&format!(
        "INSERT INTO job (id, topic, delay, create_time, body, status, update_time, run_at, ttr, priority, \
         attempt, max_retries, retry_backoff) \
         SELECT CONCAT('live-', LPAD(seq, 6, '0')), ?, 0, 0, REPEAT('b', 100), 'delay', seq * 4096, seq * 4096, 30000, \
         1, 1, 3, '[]' \
         FROM seq_1_to_{LIVE}"
    ))
    .bind(unique_topic("live").as_str())
    .execute(&mut connection)
    .await
    .expect("bulk insert of live rows");
    sqlx::query("ANALYZE TABLE job").execute(&mut connection).await.expect("statistics");
    // Two jobs per due-time bucket of 8192 ms, each written when it is due (so
    // indexed by its own bucket, not a coarse one): a cursor is a bucket and an id.
    let cursors = [(0, ""), (15_000, "live-030000"), (30_000, "live-060000"), (45_000, "live-090000"), (49_750, "")];
    for (bucket, after) in cursors {
        sqlx::query("FLUSH STATUS").execute(&mut connection).await.expect("flush status");
        let page = sqlx::query(LIVE_JOBS_DUE_QUERY)
            .bind(bucket)
            .bind(bucket)
            .bind(after)
            .bind(i64::MAX)
            .bind(PAGE)
            .fetch_all(&mut connection)
            .await
            .expect("a page of live jobs");
        let read = rows_read(&mut connection).await;
        assert!(!page.is_empty(), "live jobs after {bucket}, {after:?}");
        let first_due: i64 = page[0].try_get("run_at").expect("a due time");
        // A binary collation: the id comes back as bytes.
        let first: Vec<u8> = page[0].try_get("id").expect("an id");
        let first = String::from_utf8_lossy(&first);
        let first_bucket = first_due / 8192;
        assert!((first_bucket, first.as_ref()) > (bucket, after), "the page starts after {bucket}, {after:?}: {first}");
        assert!(read < READ_BOUND, "the page after {bucket}, {after:?} read {read} rows");
    }
    // A window that ends early reads no further than its end.
    sqlx::query("FLUSH STATUS").execute(&mut connection).await.expect("flush status");
    let window = sqlx::query(LIVE_JOBS_DUE_QUERY)
        .bind(10_000)
        .bind(10_000)
        .bind("")
        .bind(10_009)
        .bind(PAGE)
        .fetch_all(&mut connection)
        .await
        .expect("a window of live jobs");
    assert_eq!(window.len(), 20, "the jobs due in the window");
    let read = rows_read(&mut connection).await;
    assert!(read < 200, "a window of 20 jobs read {read} rows");
    connection.close().await.expect("close");
    store.close().await;
}

/// While another session holds the lock of the rows the journal changes, the
/// journal fills up to its bound and waits; when the lock goes, it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_bounded_while_the_database_does_not_take_it() {
    let Some(url) = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL") else { return };
    let store = open_scratch(&url, "node", bounded_journal_options()).await;
    let lock_every_row = || async {
        let mut blocker = connect_to(&url, &store).await;
        sqlx::query("START TRANSACTION").execute(&mut blocker).await.expect("begin");
        sqlx::query("SELECT id FROM job FOR UPDATE").fetch_all(&mut blocker).await.expect("lock every row");
        blocker
    };
    let release = |mut blocker: MySqlConnection| async move {
        sqlx::query("ROLLBACK").execute(&mut blocker).await.expect("release the locks");
        blocker.close().await.expect("close");
    };
    check_the_journal_is_bounded(&store, "mysql", Duration::from_secs(60), lock_every_row, release).await;
    store.close().await;
}
