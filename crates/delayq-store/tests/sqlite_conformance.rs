//! The store conformance suite and SQLite-specific behaviour, on temporary files.

mod common;

use std::sync::Arc;

use common::{check_concurrent_single_inserts_share_commits, print_insert_throughput};
use delayq_common::{JobState, Timestamp};
use delayq_store::testsuite::{
    self, change, get_ok, history_states, insert_ok, sample_job, unique_name, unique_topic, ALL_HISTORY,
};
use delayq_store::{JobStore, SqliteStore};

async fn temp_store() -> Option<Arc<dyn JobStore>> {
    let store = SqliteStore::open_temp("test-node".into()).await.expect("open a temporary sqlite store");
    Some(Arc::new(store))
}

delayq_store::store_conformance!(temp_store());

#[tokio::test]
async fn delete_all_live_on_a_database_of_its_own() {
    let store = temp_store().await.expect("store");
    testsuite::check_delete_all_live(Arc::clone(&store)).await;
    store.close().await;
}

#[tokio::test]
async fn store_id_follows_the_database() {
    let dir = tempfile::tempdir().expect("temp dir");
    let open = || async {
        let store = SqliteStore::open_in(dir.path(), "node".into()).await.expect("open");
        Arc::new(store) as Arc<dyn JobStore>
    };
    let other = temp_store().await.expect("store");
    testsuite::check_store_id_follows_the_database(open, Arc::clone(&other)).await;
    other.close().await;
}

#[tokio::test]
async fn a_reopened_store_sees_every_committed_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let topic = unique_topic("reopen");
    let inserted = sample_job(&unique_name("reopen"), &topic);
    let journaled = sample_job(&unique_name("reopen-journal"), &topic);
    {
        let store = SqliteStore::open_in(dir.path(), "node-a".into()).await.expect("open");
        insert_ok(&store, &inserted).await;
        insert_ok(&store, &journaled).await;
        store.record(vec![change(&inserted, JobState::Ready, Timestamp::now())]).await.expect("record");

        // A second store on the same file sees the commit while the first is open.
        let second = SqliteStore::open_in(dir.path(), "node-b".into()).await.expect("open twice");
        assert_eq!(get_ok(&second, &inserted.id).await.state, JobState::Ready);
        second.close().await;

        // close() flushes journal entries nobody waited for.
        store.journal(vec![change(&journaled, JobState::Ready, Timestamp::now())]);
        store.close().await;
    }
    let reopened = SqliteStore::open_in(dir.path(), "node-c".into()).await.expect("reopen");
    assert_eq!(get_ok(&reopened, &inserted.id).await.state, JobState::Ready);
    assert_eq!(history_states(&reopened, &journaled.id).await, [JobState::Delay, JobState::Ready]);
    let history = reopened.history(&inserted.id, ALL_HISTORY).await.expect("history");
    assert!(history.iter().all(|entry| entry.node == "node-a"), "{history:?}");
    reopened.close().await;
}

#[tokio::test]
async fn opens_sqlite_urls_and_plain_paths_creating_directories() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url_file = dir.path().join("nested/deeper/url.db");
    let url = format!("sqlite://{}", url_file.display());
    let store = SqliteStore::open(&url, "node".into()).await.expect("open url");
    store.ping().await.expect("ping");
    store.close().await;
    assert!(url_file.exists(), "the file and its directories are created");

    let path_file = dir.path().join("plain/path.db");
    let store = SqliteStore::open(&path_file.to_string_lossy(), "node".into()).await.expect("open path");
    store.close().await;
    assert!(path_file.exists());

    let journal_mode: String = {
        use sqlx::Connection;
        let mut connection = sqlx::SqliteConnection::connect(&url).await.expect("connect");
        sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut connection).await.expect("pragma")
    };
    assert_eq!(journal_mode, "wal");
}

/// An in-memory database lives while one of its connections is open: the
/// writer's connection keeps the tables the migrations made.
#[tokio::test]
async fn an_in_memory_database_keeps_its_tables() {
    let store = SqliteStore::open("sqlite::memory:", "node".into()).await.expect("open");
    let topic = unique_topic("in-memory");
    let job = sample_job(&unique_name("in-memory"), &topic);
    insert_ok(&store, &job).await;
    assert_eq!(get_ok(&store, &job.id).await, job, "readers see the writer's database");
    store.close().await;
}

#[tokio::test]
async fn a_closed_store_refuses_writes() {
    let store = SqliteStore::open_temp("node".into()).await.expect("open");
    store.close().await;
    let topic = unique_topic("closed");
    let refused = store.insert(vec![sample_job(&unique_name("closed"), &topic)]).await;
    assert!(matches!(refused, Err(delayq_store::StoreError::Unavailable { backend: "sqlite", .. })), "{refused:?}");
    store.journal(vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_single_inserts_share_commits() {
    let store = Arc::new(SqliteStore::open_temp("node".into()).await.expect("open"));
    check_concurrent_single_inserts_share_commits(Arc::clone(&store), SqliteStore::commits).await;
    store.close().await;
}

/// Prints insert throughput; run with
/// `cargo test --release -p delayq-store --test sqlite_conformance -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
#[ignore = "timing run, prints throughput"]
async fn insert_throughput() {
    let store = Arc::new(SqliteStore::open_temp("bench".into()).await.expect("open"));
    print_insert_throughput(Arc::clone(&store), 3, SqliteStore::commits).await;
    store.close().await;
}

/// Under steady commits the WAL starts over instead of growing: the writer's own
/// checkpoint, past 4,096 pages (16 MiB), copies what the background pass left,
/// and the next transaction writes the WAL from its beginning again. With the
/// checkpoint settings before (a pass every 100 ms, the writer's own past
/// 65,536 pages), these 94 MiB of bodies left a WAL of 155 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_under_steady_commits() {
    const JOBS: usize = 1_500;
    const BODY_BYTES: usize = 64 * 1024;
    const WAL_BOUND: u64 = 48 * 1024 * 1024;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open_in(dir.path(), "node".into()).await.expect("open");
    let topic = unique_topic("wal");
    let body = "x".repeat(BODY_BYTES);
    let wal = dir.path().join(format!("{}-wal", delayq_store::sqlite::DATABASE_FILE_NAME));
    let mut largest = 0;
    for index in 0..JOBS {
        let mut job = sample_job(&unique_name("wal"), &topic);
        job.body.clone_from(&body);
        insert_ok(&store, &job).await;
        if index % 100 == 99 {
            largest = largest.max(std::fs::metadata(&wal).map(|meta| meta.len()).unwrap_or(0));
        }
    }
    println!("largest WAL seen: {largest} bytes");
    assert!(largest > 0, "the store runs in WAL mode");
    assert!(largest < WAL_BOUND, "the WAL grew to {largest} bytes for {} MiB of commits", (JOBS * BODY_BYTES) >> 20);
    store.close().await;
}
