//! The store conformance suite and MySQL-specific behaviour, against the server
//! of `DELAYQ_TEST_MYSQL_URL` (e.g. `mysql://root@127.0.0.1:3306/test`).
//!
//! Each test works in a database of its own (`MysqlStore::open_scratch`),
//! dropped when its store closes. Without the variable the tests print
//! "skipped" and pass, unless `DELAYQ_TEST_REQUIRE_SERVICES=1`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{check_concurrent_single_inserts_share_commits, open_scratch, print_insert_throughput, scratch_url};
use delayq_common::{JobState, Timestamp};
use delayq_store::testsuite::{
    self, change, get_ok, history_states, insert_ok, sample_job, unique_name, unique_topic, ALL_HISTORY,
};
use delayq_store::{JobStore, MysqlStore, StoreError, StoreOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

const URL_VARIABLE: &str = "DELAYQ_TEST_MYSQL_URL";

/// Returns the server URL, or `None` after printing "skipped" (a failure when
/// services are required).
fn mysql_url() -> Option<String> {
    delayq_testkit::service(URL_VARIABLE)
}

async fn scratch_store() -> Option<Arc<dyn JobStore>> {
    let url = mysql_url()?;
    Some(Arc::new(open_scratch(&url, "test-node", StoreOptions::default()).await))
}

delayq_store::store_conformance!(scratch_store());

#[tokio::test]
async fn delete_all_live_on_a_database_of_its_own() {
    let Some(store) = scratch_store().await else { return };
    testsuite::check_delete_all_live(Arc::clone(&store)).await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_single_inserts_share_commits() {
    let Some(url) = mysql_url() else { return };
    let store = Arc::new(open_scratch(&url, "node", StoreOptions::default()).await);
    check_concurrent_single_inserts_share_commits(Arc::clone(&store), MysqlStore::commits).await;
    store.close().await;
}

/// Large bodies split a batch over several statements; refusals inside a
/// multi-row chunk are judged row by row.
#[tokio::test]
async fn large_bodies_and_refusals_inside_multi_row_chunks() {
    let Some(url) = mysql_url() else { return };
    let store = open_scratch(&url, "node", StoreOptions::default()).await;
    let topic = unique_topic("large");
    let taken = sample_job(&unique_name("taken"), &topic);
    insert_ok(&store, &taken).await;

    let mut jobs: Vec<_> = (0..300).map(|_| sample_job(&unique_name("large"), &topic)).collect();
    for (index, job) in jobs.iter_mut().enumerate() {
        job.body = format!("{index:06}{}", "é".repeat(40_000)); // 80 KB of UTF-8
    }
    jobs[100] = taken.clone();
    jobs[150].body = "x".repeat(17 << 20); // over max_allowed_packet: refuses this job only
    jobs[160].biz_key = Some("k".repeat(200)); // over VARCHAR(128): refuses this job only
    jobs[200].biz_key = Some("shared-key".into());
    jobs[201].biz_key = Some("shared-key".into());
    let outcomes = store.insert(jobs.clone()).await.expect("insert");
    assert_eq!(outcomes.len(), jobs.len());
    for (index, outcome) in outcomes.iter().enumerate() {
        match index {
            100 => testsuite::assert_refused(outcome, "IdTaken"),
            150 | 160 => {
                assert!(matches!(outcome, Err(StoreError::Unavailable { backend: "mysql", .. })), "{outcome:?}")
            }
            201 => testsuite::assert_refused(outcome, "BizKeyTaken"),
            _ => assert!(outcome.is_ok(), "job {index}: {outcome:?}"),
        }
    }
    assert_eq!(get_ok(&store, &jobs[299].id).await, jobs[299]);
    assert_eq!(get_ok(&store, &taken.id).await.body, taken.body);
    let holder = store.find_live_by_biz_key(&topic, "shared-key").await.expect("find");
    assert_eq!(holder.map(|job| job.id), Some(jobs[200].id.clone()));
    store.close().await;
}

/// Two nodes on one database: writes interleave, keys stay unique, histories
/// name the node that wrote each line.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_share_one_database() {
    let Some(url) = mysql_url() else { return };
    let first = Arc::new(open_scratch(&url, "node-a", StoreOptions::default()).await);
    let database = scratch_url(&url, &first);
    let second = Arc::new(MysqlStore::open(&database, "node-b".into()).await.expect("open the same database"));
    let topic = unique_topic("two-nodes");

    let mut tasks = JoinSet::new();
    for (node, store) in [("a", Arc::clone(&first)), ("b", Arc::clone(&second))] {
        for task in 0..10 {
            let (store, topic) = (Arc::clone(&store), topic.clone());
            tasks.spawn(async move {
                let mut won = 0;
                for round in 0..20 {
                    let mut job = sample_job(&unique_name(&format!("{node}-{task}")), &topic);
                    job.biz_key = Some(format!("key-{round}"));
                    let outcomes = store.insert(vec![job.clone()]).await.expect("insert");
                    if outcomes[0].is_ok() {
                        won += 1;
                        store.record(vec![change(&job, JobState::Finished, Timestamp::now())]).await.expect("record");
                    }
                }
                won
            });
        }
    }
    let mut won = 0;
    while let Some(done) = tasks.join_next().await {
        won += done.expect("task");
    }
    assert!(won >= 20, "every key is won at least once ({won})");

    let job = sample_job(&unique_name("handover"), &topic);
    insert_ok(&*first, &job).await;
    second.record(vec![change(&job, JobState::Ready, Timestamp::now())]).await.expect("record");
    let nodes: Vec<String> =
        first.history(&job.id, ALL_HISTORY).await.expect("history").into_iter().map(|e| e.node).collect();
    assert_eq!(nodes, ["node-a", "node-b"]);
    second.close().await;
    first.close().await;
}

/// Several nodes starting at once on an empty database: the migrations run
/// once, under a lock, and every node opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_starting_together_on_an_empty_database() {
    let Some(url) = mysql_url() else { return };
    let admin = sqlx::MySqlPool::connect(&url).await.expect("connect");
    let nanos = std::time::UNIX_EPOCH.elapsed().unwrap_or_default().as_nanos();
    // Named like a scratch database, so a run that dies here is cleaned up later.
    let name = format!("dq_test_{}_{nanos}_race", std::process::id());
    sqlx::query(&format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        .execute(&admin)
        .await
        .expect("create the database");
    let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
    let database = format!("{base}/{name}");

    let mut starts = JoinSet::new();
    for node in 0..4 {
        let database = database.clone();
        starts.spawn(async move { MysqlStore::open(&database, format!("node-{node}")).await });
    }
    let mut stores = Vec::new();
    let mut failures = Vec::new();
    while let Some(started) = starts.join_next().await {
        match started.expect("task") {
            Ok(store) => stores.push(store),
            Err(error) => failures.push(format!("{error:?}")),
        }
    }
    let store_ids: Vec<String> = stores.iter().map(|store| store.store_id().to_string()).collect();
    for store in &stores {
        store.close().await;
    }
    sqlx::query(&format!("DROP DATABASE `{name}`")).execute(&admin).await.expect("drop the database");
    assert!(failures.is_empty(), "every node starts: {failures:?}");
    assert_eq!(stores.len(), 4);
    assert!(store_ids.iter().all(|id| id == &store_ids[0]), "every node reads the same store id: {store_ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_id_follows_the_database() {
    let Some(url) = mysql_url() else { return };
    let scratch = open_scratch(&url, "owner", StoreOptions::default()).await;
    let other: Arc<dyn JobStore> = Arc::new(open_scratch(&url, "other", StoreOptions::default()).await);
    let database = scratch_url(&url, &scratch);
    let open = || async {
        let store = MysqlStore::open(&database, "node".into()).await.expect("open the scratch database");
        Arc::new(store) as Arc<dyn JobStore>
    };
    testsuite::check_store_id_follows_the_database(open, Arc::clone(&other)).await;
    let reopened = open().await;
    assert_eq!(scratch.store_id(), reopened.store_id(), "the store that created the database reads the same id");
    reopened.close().await;
    other.close().await;
    scratch.close().await;
}

/// While the server is unreachable durable writes fail fast, journal entries
/// wait; once it is back the same store commits both without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn survives_the_server_going_away_and_coming_back() {
    let Some(url) = mysql_url() else { return };
    let scratch = open_scratch(&url, "node", StoreOptions::default()).await;
    let direct = scratch_url(&url, &scratch);
    let server = server_address(&direct);
    let proxy = Proxy::start(&server).await;
    let store = MysqlStore::open(&direct.replacen(&server, &proxy.address, 1), "node".into()).await.expect("open");
    let topic = unique_topic("outage");
    let before = sample_job(&unique_name("before"), &topic);
    insert_ok(&store, &before).await;

    proxy.cut().await;
    let started = Instant::now();
    let refused = store.insert(vec![sample_job(&unique_name("during"), &topic)]).await;
    assert!(matches!(refused, Err(StoreError::Unavailable { backend: "mysql", .. })), "{refused:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "failed after {:?}", started.elapsed());
    assert!(store.ping().await.is_err());
    store.journal(vec![change(&before, JobState::Ready, Timestamp::now())]);

    proxy.resume().await;
    let after = sample_job(&unique_name("after"), &topic);
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.insert(vec![after.clone()]).await.is_err() {
        assert!(Instant::now() < deadline, "the store did not reconnect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.flush().await.expect("flush");
    assert_eq!(history_states(&scratch, &before.id).await, [JobState::Delay, JobState::Ready]);
    assert_eq!(get_ok(&scratch, &after.id).await.state, JobState::Delay);
    store.close().await;
    scratch.close().await;
}

fn server_address(url: &str) -> String {
    let after_at = url.rsplit_once('@').map_or(url, |(_, rest)| rest);
    let after_scheme = after_at.trim_start_matches("mysql://");
    after_scheme.split('/').next().unwrap_or(after_scheme).to_owned()
}

/// A TCP relay to the server that can drop every connection and refuse new ones.
struct Proxy {
    address: String,
    open: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Proxy {
    async fn start(server: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        let open = Arc::new(tokio::sync::watch::channel(true).0);
        let (server, switch) = (server.to_owned(), Arc::clone(&open));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut state = switch.subscribe();
                if !*state.borrow_and_update() {
                    continue; // refused: the client sees the connection closed
                }
                let server = server.clone();
                tokio::spawn(async move {
                    let Ok(mut upstream) = TcpStream::connect(&server).await else { return };
                    let mut client = client;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                        _ = state.changed() => {}
                    }
                });
            }
        });
        Proxy { address, open }
    }

    async fn cut(&self) {
        self.open.send_replace(false);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    async fn resume(&self) {
        self.open.send_replace(true);
    }
}

/// Prints insert throughput; run with `DELAYQ_TEST_MYSQL_URL=… cargo test --release
/// -p delayq-store --test mysql_conformance -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
#[ignore = "timing run, prints throughput"]
async fn insert_throughput() {
    let Some(url) = mysql_url() else { return };
    let store = Arc::new(open_scratch(&url, "bench", StoreOptions::default()).await);
    print_insert_throughput(Arc::clone(&store), 5, MysqlStore::commits).await;
    store.close().await;
}
