//! The distributed deployment: several `delayq serve` processes sharing one
//! Redis scheduler and one MariaDB store.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{unique_name, Client, Server};
use delayq_testkit::{eventually, service};
use serde_json::{json, Value};

const JOBS: usize = 50_000;
const CONSUMERS_PER_NODE: usize = 4;
const TTR_MS: u64 = 60_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_deliver_every_job_exactly_once() {
    let (Some(redis_url), Some(mysql_url)) = (service("DELAYQ_TEST_REDIS_URL"), service("DELAYQ_TEST_MYSQL_URL"))
    else {
        return;
    };
    let name = unique_name("dq_e2e_two_nodes");
    let database_url = common::fresh_database(&mysql_url, &name, None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes = Vec::new();
    for node in ["a", "b"] {
        let env = common::distributed_env(&redis_url, &database_url, &name, node);
        nodes.push(Server::start(&common::node_dir(dir.path(), node), &env).await);
    }
    let clients: Vec<Client> = nodes.iter().map(Server::client).collect();

    let deliveries: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let consumers: Vec<_> = clients
        .iter()
        .flat_map(|client| (0..CONSUMERS_PER_NODE).map(move |_| client.clone()))
        .map(|client| tokio::spawn(consume(client, Arc::clone(&deliveries))))
        .collect();

    let mut pushed = Vec::with_capacity(JOBS);
    for (batch_index, batch) in (0..JOBS).collect::<Vec<_>>().chunks(1_000).enumerate() {
        let jobs: Vec<Value> = batch
            .iter()
            .map(|index| json!({"topic": "two.nodes", "body": format!("job {index}"), "delay": (index * 7) % 3_000, "ttr": TTR_MS}))
            .collect();
        let client = &clients[batch_index % clients.len()];
        let (status, answer) = client.post("/push/batch", &json!({ "jobs": jobs })).await.expect("push batch");
        assert_eq!(status, 200, "{answer}");
        for item in answer["data"].as_array().expect("array") {
            pushed.push(item["id"].as_str().unwrap_or_else(|| panic!("refused: {item}")).to_owned());
        }
    }
    assert_eq!(pushed.len(), JOBS);

    // Whether all arrived in time, the counts below tell.
    eventually(Duration::from_secs(180), || async { deliveries.lock().expect("lock").len() >= JOBS }).await;
    // Give a duplicate, if any, the chance to show up.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    for consumer in consumers {
        consumer.abort();
    }
    let deliveries = deliveries.lock().expect("lock").clone();
    let missing = pushed.iter().filter(|id| !deliveries.contains_key(*id)).count();
    let duplicated = deliveries.values().filter(|count| **count > 1).count();
    println!("two nodes: {} pushed, {} delivered, {missing} missing, {duplicated} duplicated", JOBS, deliveries.len());
    assert_eq!(missing, 0, "jobs lost");
    assert_eq!(duplicated, 0, "jobs delivered twice within their ttr");
    for node in nodes {
        node.terminate().await;
    }
}

/// Pops, records and finishes jobs until aborted.
async fn consume(client: Client, deliveries: Arc<Mutex<HashMap<String, u32>>>) {
    common::consume(&client, "two.nodes", |ids| {
        {
            let mut deliveries = deliveries.lock().expect("lock");
            for id in &ids {
                *deliveries.entry(id.clone()).or_default() += 1;
            }
        }
        // The ack must land within the ttr.
        common::finish_all(&client, ids, 50)
    })
    .await;
}
