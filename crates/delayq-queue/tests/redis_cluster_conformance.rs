//! The scheduler conformance suite against a Redis Cluster
//! (`DELAYQ_TEST_REDIS_CLUSTER`: comma-separated seed URLs), plus checks
//! that the shards spread over the masters and that nodes signal each other
//! through the cluster.
//!
//! Every test gets its own key prefix, so tests share the cluster safely and
//! the exclusive checks (`clear`) only wipe their own keys.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_common::{Job, Timestamp, Topic};
use delayq_queue::Scheduler;

mod common;

use common::{connect, job, unique_prefix};
use delayq_testkit::service;

const SEEDS_VARIABLE: &str = "DELAYQ_TEST_REDIS_CLUSTER";

async fn redis_cluster() -> Option<Arc<dyn Scheduler>> {
    let seeds = service(SEEDS_VARIABLE)?;
    Some(Arc::new(connect(&seeds, &unique_prefix()).await))
}

delayq_queue::scheduler_conformance!(redis_cluster());

mod exclusive {
    use super::*;

    // Each test has a prefix of its own, so `clear` wipes nobody else's jobs.
    delayq_queue::scheduler_conformance!(exclusive: redis_cluster());
}

/// The default shard count is a multiple of the masters, and a batch spread
/// over every shard lands and comes back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_cover_the_cluster() {
    let Some(seeds) = service(SEEDS_VARIABLE) else { return };
    let scheduler = connect(&seeds, &unique_prefix()).await;
    assert!(scheduler.shards() >= 16, "{} shards", scheduler.shards());
    let topic = Topic::parse("cluster.spread").expect("topic");
    let jobs: Vec<Job> =
        (0..500).map(|n| job(&(7_000_000_000_000_000_000u64 + n).to_string(), &topic, Timestamp::now(), 4)).collect();
    for outcome in scheduler.schedule_batch(&jobs).await.expect("schedule_batch") {
        outcome.expect("scheduled");
    }
    let mut received = HashSet::new();
    loop {
        let reserved = scheduler.reserve(&topic, 100, Duration::ZERO).await.expect("reserve");
        if reserved.is_empty() {
            break;
        }
        received.extend(reserved.into_iter().map(|job| job.id));
    }
    assert_eq!(received.len(), jobs.len(), "every job of every shard came back once");
}

/// Two nodes on one prefix: a ready push on one wakes a consumer waiting on
/// the other, through cluster-wide pub/sub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_signal_each_other_through_the_cluster() {
    let Some(seeds) = service(SEEDS_VARIABLE) else { return };
    let prefix = unique_prefix();
    let consumer_node = Arc::new(connect(&seeds, &prefix).await);
    // The other node subscribes through another seed first.
    let reversed: Vec<&str> = seeds.split(',').rev().collect();
    let push_node = connect(&reversed.join(","), &prefix).await;
    let topic = Topic::parse("cluster.cross").expect("topic");
    let waiting = {
        let (node, topic) = (Arc::clone(&consumer_node), topic.clone());
        tokio::spawn(async move { node.reserve(&topic, 1, Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pushed = Instant::now();
    push_node.schedule(&job("42", &topic, Timestamp::now(), 4)).await.expect("schedule");
    let reserved = waiting.await.expect("waiter").expect("reserve");
    assert_eq!(reserved.iter().map(|job| job.id.as_str()).collect::<Vec<_>>(), ["42"]);
    assert!(pushed.elapsed() < Duration::from_millis(500), "woken {:?} after the push", pushed.elapsed());
}

/// Ended topics leave no code, name, count or ready queue in any shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_topics_leave_no_metadata() {
    let Some(seeds) = service(SEEDS_VARIABLE) else { return };
    common::topic_metadata::check_ended_topics_leave_no_metadata(&seeds).await;
}

/// A topic whose metadata was freed works normally when pushed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_pushed_again_after_freeing() {
    let Some(seeds) = service(SEEDS_VARIABLE) else { return };
    common::topic_metadata::check_topic_pushed_again_after_freeing(&seeds).await;
}

/// Pushes racing the delete of a topic's last job keep their topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_racing_the_last_delete_keep_their_topic() {
    let Some(seeds) = service(SEEDS_VARIABLE) else { return };
    common::topic_metadata::check_pushes_racing_the_last_delete(&seeds).await;
}
