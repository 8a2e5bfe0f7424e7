//! When the SQLite store syncs its commits: `FULL` unless asked otherwise, so
//! an acknowledged write survives a power cut; `NORMAL` only on request.

use delayq_store::testsuite::{get_ok, insert_ok, sample_job, unique_name, unique_topic};
use delayq_store::{JobStore, SqliteStore, SqliteSync, StoreOptions};

#[tokio::test]
async fn the_store_syncs_every_commit_by_default() {
    assert_eq!(StoreOptions::default().sqlite_sync, SqliteSync::Full);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open_in(dir.path(), "node".into()).await.expect("open");
    assert_eq!(store.sqlite_sync().await.expect("read the setting"), SqliteSync::Full);
    let job = sample_job(&unique_name("full"), &unique_topic("durability"));
    insert_ok(&store, &job).await;
    assert_eq!(get_ok(&store, &job.id).await.id, job.id);
    store.close().await;
}

#[tokio::test]
async fn normal_syncs_are_an_opt_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions { sqlite_sync: SqliteSync::Normal, ..StoreOptions::default() };
    let store = SqliteStore::open_in_with_options(dir.path(), "node".into(), options).await.expect("open");
    assert_eq!(store.sqlite_sync().await.expect("read the setting"), SqliteSync::Normal);
    store.close().await;
}
