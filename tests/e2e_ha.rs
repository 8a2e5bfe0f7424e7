//! High availability: three `delayq serve` processes sharing Redis and MariaDB,
//! electing their leader through ZooKeeper, with real failures: the leader
//! killed with SIGKILL, the leader frozen with SIGSTOP past its session, and
//! ZooKeeper itself killed and restarted.
//!
//! Each test runs its own ZooKeeper (the jars of the installed package, on a
//! free port, tick 500 ms) so it can restart it and so session expiry is
//! prompt; the shared one is never touched. Redis keys get a unique prefix and
//! MariaDB a fresh database per test.

mod common;
mod ha;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{now_ms, Client};
use delayq_testkit::eventually;
use ha::{
    agreed_leader, start_nodes, view, wait_for_leader, Backends, Node, PrivateZookeeper, NODE_NAMES, SESSION_TIMEOUT,
    SETTLE,
};
use serde_json::{json, Value};

/// Long enough that no job is redelivered while a test runs.
const TTR_MS: u64 = 120_000;

// ---------------------------------------------------------------------------
// Pushing and consuming

/// Pushes `count` jobs of `topic` due from `first_due` on, `spacing_ms` apart; returns id → runAt.
async fn push_spread(
    client: &Client,
    topic: &str,
    count: usize,
    first_due: u64,
    spacing_ms: u64,
) -> HashMap<String, u64> {
    let mut pushed = HashMap::with_capacity(count);
    let indices: Vec<usize> = (0..count).collect();
    for batch in indices.chunks(1_000) {
        let jobs: Vec<Value> = batch
            .iter()
            .map(|index| {
                let run_at = first_due + *index as u64 * spacing_ms;
                json!({"topic": topic, "body": format!("job {index}"), "runAt": run_at, "ttr": TTR_MS})
            })
            .collect();
        let (status, answer) = client.post("/push/batch", &json!({ "jobs": jobs })).await.expect("push batch");
        assert_eq!(status, 200, "{answer}");
        for item in answer["data"].as_array().expect("array") {
            let id = item["id"].as_str().unwrap_or_else(|| panic!("refused: {item}")).to_owned();
            pushed.insert(id, item["runAt"].as_u64().expect("runAt"));
        }
    }
    assert_eq!(pushed.len(), count);
    pushed
}

/// Every delivery seen: job id → when each pop returned it (epoch ms).
type Deliveries = Arc<Mutex<HashMap<String, Vec<u64>>>>;

/// Pops jobs of `topic` through `client` and records them, until aborted.
async fn consume(client: Client, topic: String, deliveries: Deliveries) {
    common::consume(&client, &topic, |ids| {
        let popped_at = now_ms();
        let mut deliveries = deliveries.lock().expect("lock");
        for id in ids {
            deliveries.entry(id).or_default().push(popped_at);
        }
        std::future::ready(())
    })
    .await;
}

/// Starts `per_node` consumers on each of the nodes at `indices`.
fn start_consumers(
    nodes: &[Node],
    indices: &[usize],
    per_node: usize,
    topic: &str,
    deliveries: &Deliveries,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut consumers = Vec::new();
    for &index in indices {
        for _ in 0..per_node {
            let client = nodes[index].client.clone();
            consumers.push(tokio::spawn(consume(client, topic.to_owned(), Arc::clone(deliveries))));
        }
    }
    consumers
}

/// Waits until every pushed job was delivered (or `SETTLE` passes), then a moment for duplicates.
async fn wait_for_deliveries(pushed: &HashMap<String, u64>, deliveries: &Deliveries, last_due: u64) {
    let deadline = last_due + SETTLE.as_millis() as u64;
    let until_deadline = Duration::from_millis(deadline.saturating_sub(now_ms()));
    // Whether all arrived in time, the caller's counts tell.
    eventually(until_deadline, || async { deliveries.lock().expect("lock").len() >= pushed.len() }).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
}

/// Returns (missing, delivered more than once) among `pushed`.
fn missing_and_duplicated(pushed: &HashMap<String, u64>, deliveries: &Deliveries) -> (usize, usize) {
    let deliveries = deliveries.lock().expect("lock");
    let missing = pushed.keys().filter(|id| !deliveries.contains_key(*id)).count();
    let duplicated = deliveries.values().filter(|times| times.len() > 1).count();
    (missing, duplicated)
}

/// Describes a set of latenesses in ms: count, p50, p99, max.
fn summary(mut lateness: Vec<i64>) -> String {
    if lateness.is_empty() {
        return "none".to_owned();
    }
    lateness.sort_unstable();
    let at = |quantile: f64| lateness[((lateness.len() - 1) as f64 * quantile).round() as usize];
    format!("{} jobs, p50 {} ms, p99 {} ms, max {} ms", lateness.len(), at(0.5), at(0.99), at(1.0))
}

/// Deletes every live job of the test (its Redis keys) and the test database.
async fn clean_up(nodes: Vec<Node>, backends: &Backends) {
    if let Some(node) = nodes.iter().find(|node| node.server.is_some()) {
        let _ = node.client.get("/clearAll").await;
    }
    for node in nodes {
        if let Some(server) = node.server {
            server.kill9().await;
        }
    }
    backends.drop_database().await;
}

// ---------------------------------------------------------------------------
// The tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_leader_is_replaced_and_no_job_is_lost() {
    let Some(backends) = Backends::create("dq_ha_kill").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let zookeeper = PrivateZookeeper::start(dir.path()).await;
    let mut nodes = start_nodes(dir.path(), &backends, &zookeeper.connect_string()).await;
    let leader = wait_for_leader(&nodes, &[0, 1, 2], Some(&NODE_NAMES[..]), SETTLE).await;
    roles_and_readiness_are_reported(&nodes, leader).await;
    let survivors: Vec<usize> = (0..3).filter(|index| *index != leader).collect();

    const JOBS: usize = 5_000;
    let topic = "ha.kill";
    let deliveries = Deliveries::default();
    let consumers = start_consumers(&nodes, &survivors, 3, topic, &deliveries);
    // 5,000 jobs fall due over 10 s, starting shortly after they are pushed.
    let first_due = now_ms() + 2_000;
    let pushed = push_spread(&nodes[survivors[0]].client, topic, JOBS, first_due, 2).await;
    let last_due = first_due + 2 * JOBS as u64;

    let kill_at = first_due + 3_000;
    tokio::time::sleep(Duration::from_millis(kill_at.saturating_sub(now_ms()))).await;
    let killed_at = now_ms();
    let killed = Instant::now();
    nodes[leader].server.take().expect("leader runs").kill9().await;
    let survivor_names: Vec<&str> = survivors.iter().map(|index| nodes[*index].name).collect();
    let new_leader = wait_for_leader(&nodes, &survivors, Some(&survivor_names[..]), SETTLE).await;
    let takeover = killed.elapsed();
    let elected_at = now_ms();
    println!("leader {} killed; {} leads after {takeover:?}", nodes[leader].name, nodes[new_leader].name);
    assert!(
        takeover <= SESSION_TIMEOUT + Duration::from_secs(2),
        "a new leader took {takeover:?}, more than the session timeout + 2 s"
    );

    wait_for_deliveries(&pushed, &deliveries, last_due).await;
    for consumer in consumers {
        consumer.abort();
    }
    let (missing, duplicated) = missing_and_duplicated(&pushed, &deliveries);
    let delivered = deliveries.lock().expect("lock").clone();
    let mut in_gap = Vec::new();
    let mut outside_gap = Vec::new();
    for (id, run_at) in &pushed {
        let Some(first) = delivered.get(id).and_then(|times| times.first()) else {
            continue;
        };
        let lateness = *first as i64 - *run_at as i64;
        assert!(lateness >= -5, "job {id} delivered {lateness} ms before it was due");
        if (killed_at..=elected_at).contains(run_at) {
            in_gap.push(lateness);
        } else {
            outside_gap.push(lateness);
        }
    }
    println!("lateness of jobs due while no node led: {}", summary(in_gap));
    println!("lateness of the other jobs: {}", summary(outside_gap));
    println!("{JOBS} pushed, {} delivered, {missing} missing, {duplicated} duplicated", delivered.len());
    assert_eq!(missing, 0, "jobs lost");
    assert_eq!(duplicated, 0, "jobs delivered twice within their ttr");
    clean_up(nodes, &backends).await;
}

/// `/stats` shows each node's role, the leader and the members; `/ready` reports ZooKeeper.
async fn roles_and_readiness_are_reported(nodes: &[Node], leader: usize) {
    for (index, node) in nodes.iter().enumerate() {
        let (status, stats) = node.client.get("/stats").await.expect("stats");
        assert_eq!(status, 200, "{stats}");
        let expected_role = if index == leader { "leader" } else { "follower" };
        assert_eq!(stats["data"]["role"], expected_role, "{}: {stats}", node.name);
        assert_eq!(stats["data"]["leader"], nodes[leader].name, "{}: {stats}", node.name);
        assert_eq!(stats["data"]["members"], json!(NODE_NAMES), "{}: {stats}", node.name);
        let (status, ready) = node.client.get("/ready").await.expect("ready");
        assert_eq!(status, 200, "{}: {ready}", node.name);
        assert_eq!(ready["data"]["backends"]["zookeeper"], "up", "{}: {ready}", node.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_leader_returns_as_a_follower_without_leader_work() {
    let Some(backends) = Backends::create("dq_ha_freeze").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let zookeeper = PrivateZookeeper::start(dir.path()).await;
    let nodes = start_nodes(dir.path(), &backends, &zookeeper.connect_string()).await;
    let frozen = wait_for_leader(&nodes, &[0, 1, 2], Some(&NODE_NAMES[..]), SETTLE).await;
    let others: Vec<usize> = (0..3).filter(|index| *index != frozen).collect();

    const JOBS: usize = 1_000;
    let topic = "ha.freeze";
    let deliveries = Deliveries::default();
    let consumers = start_consumers(&nodes, &others, 2, topic, &deliveries);
    // Due over 15 s: before, during and after the freeze.
    let first_due = now_ms() + 1_500;
    let pushed = push_spread(&nodes[others[0]].client, topic, JOBS, first_due, 15).await;
    let last_due = first_due + 15 * JOBS as u64;

    tokio::time::sleep(Duration::from_millis((first_due + 2_000).saturating_sub(now_ms()))).await;
    nodes[frozen].server().signal("STOP");
    // Read once the signal is sent, not before: `kill` takes milliseconds to start, and
    // a timer round the node began in that time is not one after the freeze.
    let stopped_at = now_ms();
    // Members are not compared: the frozen node stays one until its session expires.
    let successor = wait_for_leader(&nodes, &others, None, SETTLE).await;
    let elected_after = now_ms() - stopped_at;
    // Keep it frozen well past its session timeout.
    let thaw_at = stopped_at + SESSION_TIMEOUT.as_millis() as u64 + 3_000;
    tokio::time::sleep(Duration::from_millis(thaw_at.saturating_sub(now_ms()))).await;
    nodes[frozen].server().signal("CONT");
    let continued_at = now_ms();
    println!(
        "{} frozen; {} leads {elected_after} ms later; thawed after {} ms",
        nodes[frozen].name,
        nodes[successor].name,
        continued_at - stopped_at
    );

    let said = roles_until_following(&nodes[frozen].client).await;
    assert!(!said.contains(&Some("leader".to_owned())), "the thawed node claimed to lead: {said:?}");

    // It comes back as a follower of the new leader, and the cluster has one leader.
    let leader = wait_for_leader(&nodes, &[0, 1, 2], Some(&NODE_NAMES[..]), SETTLE).await;
    assert_eq!(leader, successor, "leadership stays with the successor");

    wait_for_deliveries(&pushed, &deliveries, last_due).await;
    for consumer in consumers {
        consumer.abort();
    }
    let (missing, duplicated) = missing_and_duplicated(&pushed, &deliveries);
    assert_eq!(missing, 0, "jobs lost");
    assert_eq!(duplicated, 0, "jobs delivered twice within their ttr");

    check_promotions(&backends, JOBS, nodes[frozen].name, stopped_at).await;
    let frozen_log = nodes[frozen].server().log();
    let terms = frozen_log.matches("leader work starts").count();
    assert_eq!(terms, 1, "the frozen node led once, before it froze:\n{frozen_log}");
    clean_up(nodes, &backends).await;
}

/// The roles a thawed node reports, each change once, until it follows the
/// new leader (or [`SETTLE`] passes).
async fn roles_until_following(client: &Client) -> Vec<Option<String>> {
    let mut said = Vec::new();
    let thawing = Instant::now();
    loop {
        let role = view(client).await.map(|view| view.role);
        if said.last() != Some(&role) {
            said.push(role.clone());
        }
        if role.as_deref() == Some("follower") || thawing.elapsed() > SETTLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("the thawed node said {said:?} within {:?}", thawing.elapsed());
    said
}

/// Checks the journal: each of the `jobs` jobs was promoted once, and never by
/// the node `frozen` after `stopped_at`.
async fn check_promotions(backends: &Backends, jobs: usize, frozen: &str, stopped_at: u64) {
    let mut connection = backends.connect().await;
    let started = Instant::now();
    let promoted = loop {
        let promoted: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT job_id) FROM job_log WHERE status = 'ready'")
            .fetch_one(&mut connection)
            .await
            .expect("count promotions");
        if promoted as usize >= jobs || started.elapsed() > SETTLE {
            break promoted;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(promoted as usize, jobs, "every job's promotion is journaled");
    // Text columns have a binary collation: read them as bytes.
    let twice: Vec<(Vec<u8>, i64)> = sqlx::query_as(
        "SELECT job_id, COUNT(*) FROM job_log WHERE status = 'ready' GROUP BY job_id HAVING COUNT(*) > 1",
    )
    .fetch_all(&mut connection)
    .await
    .expect("promotions per job");
    let twice: Vec<(String, i64)> =
        twice.into_iter().map(|(id, count)| (String::from_utf8_lossy(&id).into_owned(), count)).collect();
    assert!(twice.is_empty(), "jobs promoted more than once: {twice:?}");
    let by_node: Vec<(Vec<u8>, i64)> =
        sqlx::query_as("SELECT node, COUNT(*) FROM job_log WHERE status = 'ready' GROUP BY node ORDER BY node")
            .fetch_all(&mut connection)
            .await
            .expect("promotions per node");
    let by_node: Vec<(String, i64)> =
        by_node.into_iter().map(|(node, count)| (String::from_utf8_lossy(&node).into_owned(), count)).collect();
    let late: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM job_log WHERE status = 'ready' AND node = ? AND update_time > ?")
            .bind(frozen)
            .bind(stopped_at as i64)
            .fetch_one(&mut connection)
            .await
            .expect("late promotions");
    println!("promotions per node: {by_node:?}; by {frozen} after it froze: {late}");
    assert_eq!(late, 0, "the frozen leader promoted jobs after it was frozen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_zookeeper_leaves_exactly_one_leader() {
    let Some(backends) = Backends::create("dq_ha_zk").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut zookeeper = PrivateZookeeper::start(dir.path()).await;
    let nodes = start_nodes(dir.path(), &backends, &zookeeper.connect_string()).await;
    wait_for_leader(&nodes, &[0, 1, 2], Some(&NODE_NAMES[..]), SETTLE).await;

    zookeeper.kill();
    // Every node notices and stops leader work; readiness names ZooKeeper.
    let started = Instant::now();
    for node in &nodes {
        let disconnected = eventually(SETTLE.saturating_sub(started.elapsed()), || async {
            match view(&node.client).await.map(|view| view.role) {
                Some(role) if role == "disconnected" => Ok(()),
                role => Err(role),
            }
        })
        .await;
        if let Err(role) = disconnected {
            panic!("{} still says {role:?} without zookeeper", node.name);
        }
        let (status, ready) = node.client.get("/ready").await.expect("ready");
        assert_eq!(status, 503, "{}: {ready}", node.name);
        assert_eq!(ready["message"], "zookeeper is unavailable", "{}: {ready}", node.name);
        assert_eq!(ready["data"]["backends"]["zookeeper"], "down", "{}: {ready}", node.name);
    }
    println!("every node is disconnected {:?} after zookeeper died", started.elapsed());
    tokio::time::sleep(Duration::from_secs(2)).await;

    zookeeper.spawn().await;
    let restarted = Instant::now();
    let leader = wait_for_leader(&nodes, &[0, 1, 2], Some(&NODE_NAMES[..]), SETTLE).await;
    println!("{} leads {:?} after zookeeper restarted", nodes[leader].name, restarted.elapsed());
    // Still exactly one leader a moment later, and every node is ready again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(agreed_leader(&nodes, &[0, 1, 2], Some(&NODE_NAMES[..])).await, Some(leader), "leadership is stable");
    for node in &nodes {
        let (status, ready) = node.client.get("/ready").await.expect("ready");
        assert_eq!(status, 200, "{}: {ready}", node.name);
    }

    // The leader's timer runs again: a job due soon is delivered through another node.
    let consumer = (leader + 1) % nodes.len();
    let (status, pushed) = nodes[leader]
        .client
        .post("/push", &json!({"topic": "ha.zk", "body": "after the restart", "delay": 300}))
        .await
        .expect("push");
    assert_eq!(status, 200, "{pushed}");
    let (status, popped) = nodes[consumer].client.get("/pop?topic=ha.zk&timeout=2500").await.expect("pop");
    assert_eq!(status, 200, "{popped}");
    assert_eq!(popped["data"][0]["id"], pushed["data"]["id"], "the job falls due after the restart: {popped}");
    clean_up(nodes, &backends).await;
}
