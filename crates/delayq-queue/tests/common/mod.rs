//! What the test files share: the service variable, unique key prefixes,
//! connecting to Redis, plain jobs and plain push requests, and a scheduler
//! whose calls a test can intercept.

#![allow(dead_code, unreachable_pub)]

pub mod deployments;
pub mod intercept;
pub mod topic_metadata;

use std::time::Duration;

use delayq_common::{Due, Job, JobId, PushRequest, Timestamp, Topic};
use delayq_queue::{RedisScheduler, RedisSchedulerOptions};
pub use delayq_testkit::topic;

/// A key prefix no other test (or run) uses.
pub fn unique_prefix() -> String {
    format!("dqtest:{}", delayq_testkit::unique_name("run"))
}

/// Connects a scheduler to `url` (one server, or comma-separated cluster seeds) under `prefix`.
pub async fn connect(url: &str, prefix: &str) -> RedisScheduler {
    let options = RedisSchedulerOptions { prefix: prefix.to_owned(), ..RedisSchedulerOptions::default() };
    RedisScheduler::connect(url, options).await.unwrap_or_else(|error| panic!("connect to {url}: {error:?}"))
}

/// A delayed job with plain-push defaults ([`delayq_testkit::job`]) and a
/// body of `body_len` bytes.
pub fn job(id: &str, topic: &Topic, run_at: Timestamp, body_len: usize) -> Job {
    Job { body: "x".repeat(body_len), ..delayq_testkit::job(id, topic, run_at) }
}

/// A push of `body` to `topic` after `delay`, with `id` when given; every
/// other field is left to the defaults.
pub fn push_request(topic: &Topic, id: Option<&JobId>, body: String, delay: Duration) -> PushRequest {
    PushRequest {
        id: id.cloned(),
        topic: topic.clone(),
        body,
        due: Due::Delay(delay),
        create_time: None,
        ttr: None,
        priority: None,
        max_retries: None,
        retry_backoff: Vec::new(),
        ttl: Duration::ZERO,
        subtopic: None,
        biz_key: None,
        replace: false,
        groups: Vec::new(),
    }
}
