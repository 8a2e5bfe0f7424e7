//! The console's pages stay fast with 1,000,000 jobs in the store: each page
//! of the real binary renders in at most 200 ms (every one of several HTTP
//! GETs, timed here), on SQLite and on MariaDB. The jobs are pushed through
//! `/push/batch`, most into one topic, due over the next minute, hour, day
//! and later, with some dead ones.

mod common;

use std::time::{Duration, Instant};

use common::{fresh_database, unique_name, Client, Server};
use delayq_testkit::eventually;
use serde_json::{json, Value};

/// How many jobs the store holds while the pages are timed.
const JOBS: usize = 1_000_000;
/// The jobs of one `/push/batch`.
const BATCH: usize = 1_000;
/// Batches in flight at once.
const PUSHERS: usize = 4;
/// The slowest a page may render.
const PAGE_BUDGET: Duration = Duration::from_millis(200);
/// How many times each page is timed (after one untimed view).
const VIEWS: usize = 5;
/// Topics besides the big one, each with a share of the jobs.
const SMALL_TOPICS: usize = 20;

/// Serializes the backends: each times pages, and they would slow each other down.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn console_pages_render_fast_with_a_million_jobs_on_sqlite() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    time_pages_at_scale(&server, "sqlite").await;
    assert!(server.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn console_pages_render_fast_with_a_million_jobs_on_mariadb() {
    let Some(root_url) = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL") else { return };
    let _turn = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = unique_name("console_scale");
    let database_url = fresh_database(&root_url, &database, None).await;
    let server = Server::start(dir.path(), &[("DELAYQ_DATABASE_URL", database_url.as_str())]).await;
    time_pages_at_scale(&server, "mariadb").await;
    assert!(server.terminate().await);
    // A million rows are too many to leave behind on the shared server.
    use sqlx::Connection;
    let mut connection = sqlx::MySqlConnection::connect(&root_url).await.expect("connect to mariadb");
    sqlx::query(&format!("DROP DATABASE `{database}`")).execute(&mut connection).await.expect("drop database");
}

async fn time_pages_at_scale(server: &Server, backend: &str) {
    let client = server.client();
    let big = unique_name("bulk");
    let started = Instant::now();
    fill(&server.base_url, &big).await;
    println!("{backend}: {JOBS} jobs pushed in {:?}", started.elapsed());
    let dead_topic = format!("{big}-dead");
    let dead = dead_job(&client, &dead_topic).await;
    let (_, stats) = client.get("/stats").await.expect("stats");
    let live: u64 =
        ["delay", "ready", "reserved"].iter().map(|state| stats["data"]["totals"][state].as_u64().unwrap_or(0)).sum();
    assert!(live >= JOBS as u64, "{backend}: the store holds {live} live jobs");

    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let pages = [
        "/console".to_owned(),
        "/console/topics".to_owned(),
        format!("/console/topics/{big}"),
        format!("/console/topics/{big}/jobs?state=delay"),
        format!("/console/topics/{dead_topic}/jobs?state=dead"),
        format!("/console/jobs/{dead}"),
        format!("/console/search?id={dead}"),
        "/console/forwarding".to_owned(),
    ];
    let mut slow = Vec::new();
    for page in &pages {
        let url = format!("{}{page}", server.base_url);
        let warm = http.get(&url).send().await.expect("get");
        assert!(warm.status().is_success() || warm.status().is_redirection(), "{page}: {}", warm.status());
        let mut times = Vec::with_capacity(VIEWS);
        for _ in 0..VIEWS {
            let timer = Instant::now();
            let response = http.get(&url).send().await.expect("get");
            let status = response.status();
            let body = response.text().await.expect("body");
            times.push(timer.elapsed());
            assert!(status.is_success() || status.is_redirection(), "{page}: {status}");
            assert!(status.is_redirection() || body.contains("</html>"), "{page}: a whole page");
        }
        times.sort();
        let (median, slowest) = (times[VIEWS / 2], times[VIEWS - 1]);
        println!("{backend}: {page} median {median:?}, slowest {slowest:?}, all {times:?}");
        if slowest > PAGE_BUDGET {
            slow.push(format!("{page} {slowest:?}"));
        }
    }
    assert!(slow.is_empty(), "{backend}: pages slower than {PAGE_BUDGET:?} with {JOBS} jobs: {slow:?}");

    // The listing pages on: the second page follows the first.
    let first = http.get(format!("{}/console/topics/{big}/jobs?state=delay", server.base_url)).send().await;
    let first = first.expect("get").text().await.expect("body");
    assert!(first.contains("&amp;after=") || first.contains("&after="), "a full page links to the next");
}

/// Pushes [`JOBS`] jobs: nine in ten into `big`, the rest spread over small
/// topics; due within the minute, hour, day, or later.
async fn fill(base_url: &str, big: &str) {
    let batches = JOBS / BATCH;
    let mut next = 0usize;
    let mut running = tokio::task::JoinSet::new();
    while next < batches || !running.is_empty() {
        while next < batches && running.len() < PUSHERS {
            let url = format!("{base_url}/push/batch");
            let body = batch(big, next);
            running.spawn(async move { push_batch(&url, body).await });
            next += 1;
        }
        if let Some(done) = running.join_next().await {
            done.expect("pusher");
        }
    }
}

fn batch(big: &str, index: usize) -> Value {
    let delays = [30_000u64, 1_800_000, 43_200_000, 172_800_000];
    let jobs: Vec<Value> = (0..BATCH)
        .map(|slot| {
            let number = index * BATCH + slot;
            let topic =
                if number.is_multiple_of(10) { format!("{big}-{}", number % SMALL_TOPICS) } else { big.to_owned() };
            json!({"topic": topic, "body": format!("{{\"n\":{number}}}"), "delay": delays[number % delays.len()]})
        })
        .collect();
    json!({"jobs": jobs})
}

async fn push_batch(url: &str, body: Value) {
    let http = reqwest::Client::new();
    for attempt in 0..5 {
        match http.post(url).json(&body).timeout(Duration::from_secs(60)).send().await {
            Ok(response) if response.status().is_success() => {
                let answer: Value = response.json().await.expect("batch answer");
                let items = answer["data"].as_array().expect("items");
                assert!(items.iter().all(|item| item.get("error").is_none()), "every job accepted");
                return;
            }
            Ok(response) if response.status().as_u16() == 503 && attempt < 4 => {}
            Ok(response) => panic!("push batch: {}", response.status()),
            Err(error) if attempt < 4 => println!("push batch retried: {error}"),
            Err(error) => panic!("push batch: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A dead job of `topic` (no retry, its one delivery let run out).
async fn dead_job(client: &Client, topic: &str) -> String {
    let (status, body) = client
        .post("/push", &json!({"topic": topic, "body": "dead", "ttr": 100, "maxRetries": 0}))
        .await
        .expect("push");
    assert_eq!(status, 200, "{body}");
    let id = body["data"]["id"].as_str().expect("id").to_owned();
    let popped = eventually(Duration::from_secs(20), || async {
        let (_, body) = client.post_empty(&format!("/pop?topic={topic}")).await.expect("pop");
        body["data"].as_array().is_some_and(|jobs| jobs.iter().any(|job| job["id"] == id.as_str()))
    })
    .await;
    assert!(popped, "the job is delivered once");
    let died = eventually(Duration::from_secs(20), || async {
        let (_, body) = client.get(&format!("/jobs/{id}")).await.expect("get");
        body["data"]["state"] == "dead"
    })
    .await;
    assert!(died, "the job is dead");
    id
}
