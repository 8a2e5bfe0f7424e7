//! What keeps the MySQL store bounded: the retention task, counts that read no
//! ended row, and the journal's bound while the database does not take writes.
//! Against the server of `DELAYQ_TEST_MYSQL_URL`, each test in a database of
//! its own; without the variable the tests print "skipped" and pass.

use std::time::{Duration, Instant};

use delayq_common::{JobState, Timestamp, Topic};
use delayq_store::mysql::COUNTS_QUERY;
use delayq_store::testsuite::{change, get_ok, history_states, insert_ok, sample_job, unique_name, unique_topic};
use delayq_store::{JobStore, MysqlStore, StoreError, StoreOptions};
use serde_json::Value;
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, Row};

async fn open_scratch(url: &str, options: StoreOptions) -> MysqlStore {
    match MysqlStore::open_scratch_with_options(url, "node".into(), options).await {
        Ok(store) => store,
        Err(error) => panic!("open a scratch mysql store: {error:?}"),
    }
}

/// A connection of its own to the scratch database of `store`.
async fn connect_to(url: &str, store: &MysqlStore) -> MySqlConnection {
    let name = store.scratch_database().expect("a scratch store");
    let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
    MySqlConnection::connect(&format!("{base}/{name}")).await.expect("connect")
}

async fn eventually<F: std::future::Future<Output = bool>>(what: &str, limit: Duration, mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn counts_of(counts: &[delayq_store::StateCount], topic: &Topic) -> Vec<(JobState, u64)> {
    let mut mine: Vec<(JobState, u64)> =
        counts.iter().filter(|count| &count.topic == topic).map(|count| (count.state, count.count)).collect();
    mine.sort();
    mine
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

/// The store's own task purges a job that ended longer ago than the retention,
/// with its history; a live job and a job that ended recently stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_task_purges_jobs_ended_before_the_retention() {
    let Some(url) = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL") else { return };
    let options = StoreOptions {
        retention: Some(Duration::from_secs(3_600)),
        purge_interval: Duration::from_millis(50),
        ..StoreOptions::default()
    };
    let store = open_scratch(&url, options).await;
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

    eventually("the old job is purged", Duration::from_secs(15), || async {
        store.get(&old.id).await.expect("get").is_none()
    })
    .await;
    assert!(history_states(&store, &old.id).await.is_empty(), "its history goes with it");
    assert_eq!(get_ok(&store, &recent.id).await.state, JobState::Dead);
    assert_eq!(get_ok(&store, &live.id).await.state, JobState::Delay);
    let counts = store.counts().await.expect("counts");
    assert_eq!(
        counts_of(&counts, &topic),
        [(JobState::Delay, 1), (JobState::Dead, 1)],
        "the purged job left its count"
    );
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
    let store = open_scratch(&url, StoreOptions::default()).await;
    let live_topic = unique_topic("live");
    let live: Vec<_> = (0..3).map(|_| sample_job(&unique_name("live"), &live_topic)).collect();
    assert!(store.insert(live.clone()).await.expect("insert").iter().all(Result::is_ok));
    store.record(vec![change(&live[0], JobState::Ready, Timestamp::now())]).await.expect("record");

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
    let reads: Vec<(String, String)> = sqlx::query_as(
        "SELECT VARIABLE_NAME, CAST(VARIABLE_VALUE AS CHAR) FROM information_schema.SESSION_STATUS \
         WHERE VARIABLE_NAME LIKE 'HANDLER_READ%'",
    )
    .fetch_all(&mut connection)
    .await
    .expect("handler counters");
    let total: u64 = reads.iter().filter_map(|(_, value)| value.parse::<u64>().ok()).sum();
    assert!(total < READ_BOUND, "the counts read {total} rows: {reads:?}");
    assert!(rows.len() >= 6);

    let counts = store.counts().await.expect("counts");
    assert_eq!(counts_of(&counts, &live_topic), [(JobState::Delay, 2), (JobState::Ready, 1)]);
    let quarter = ENDED / 4;
    assert_eq!(
        counts_of(&counts, &ended_topic),
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

/// While another session holds the lock of the rows the journal changes, the
/// journaled changes wait in memory: once `journal_max` of them wait, the store
/// says it has no room (naming mysql) and the backlog stays put; when the lock
/// goes, the journal drains by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_bounded_while_the_database_does_not_take_it() {
    const BOUND: usize = 20;
    let Some(url) = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL") else { return };
    let store = open_scratch(&url, StoreOptions { journal_max: BOUND, ..StoreOptions::default() }).await;
    let topic = unique_topic("bound");
    let jobs: Vec<_> = (0..BOUND).map(|_| sample_job(&unique_name("bound"), &topic)).collect();
    assert!(store.insert(jobs.clone()).await.expect("insert").iter().all(Result::is_ok));

    let mut blocker = connect_to(&url, &store).await;
    sqlx::query("START TRANSACTION").execute(&mut blocker).await.expect("begin");
    sqlx::query("SELECT id FROM job FOR UPDATE").fetch_all(&mut blocker).await.expect("lock every row");
    for job in &jobs {
        store.check_journal_room().expect("room below the bound");
        store.journal(vec![change(job, JobState::Ready, Timestamp::now())]);
    }
    assert_eq!(store.journal_backlog(), BOUND);
    let refused = store.check_journal_room();
    assert!(matches!(refused, Err(StoreError::Unavailable { backend: "mysql", .. })), "{refused:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.journal_backlog(), BOUND, "nothing committed, nothing added");

    sqlx::query("ROLLBACK").execute(&mut blocker).await.expect("release the locks");
    eventually("the journal drains", Duration::from_secs(60), || async { store.journal_backlog() == 0 }).await;
    store.check_journal_room().expect("room again");
    for job in &jobs {
        assert_eq!(get_ok(&store, &job.id).await.state, JobState::Ready);
    }
    blocker.close().await.expect("close");
    store.close().await;
}
