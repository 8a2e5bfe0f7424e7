//! What the test files share: the service variable, unique key prefixes,
//! connecting to Redis, plain jobs and plain push requests, and a scheduler
//! whose calls a test can intercept.

#![allow(dead_code, unreachable_pub)]

pub mod intercept;
pub mod topic_metadata;

use std::time::Duration;

use delayq_common::{Due, Job, JobId, JobState, PushRequest, Timestamp, Topic};
use delayq_queue::{RedisScheduler, RedisSchedulerOptions};

/// A key prefix no other test (or run) uses.
pub fn unique_prefix() -> String {
    format!("dqtest:{}", delayq_testkit::unique_name("run"))
}

/// Connects a scheduler to `url` (one server, or comma-separated cluster seeds) under `prefix`.
pub async fn connect(url: &str, prefix: &str) -> RedisScheduler {
    let options = RedisSchedulerOptions { prefix: prefix.to_owned(), ..RedisSchedulerOptions::default() };
    RedisScheduler::connect(url, options).await.unwrap_or_else(|error| panic!("connect to {url}: {error:?}"))
}

/// A delayed job with plain-push defaults and a body of `body_len` bytes.
pub fn job(id: &str, topic: &Topic, run_at: Timestamp, body_len: usize) -> Job {
    let now = Timestamp::now();
    Job {
        id: JobId::parse(id).expect("valid id"),
        topic: topic.clone(),
        subtopic: None,
        body: "x".repeat(body_len),
        biz_key: None,
        create_time: now,
        delay: run_at.since(now),
        run_at,
        ttr: Duration::from_secs(30),
        priority: 1,
        max_retries: 10,
        retry_backoff: Vec::new(),
        ttl: Duration::ZERO,
        attempt: 1,
        state: JobState::Delay,
        result: None,
        updated_at: now,
    }
}

/// Parses a topic name the test knows to be valid.
pub fn topic(name: &str) -> Topic {
    Topic::parse(name).expect("valid topic")
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
    }
}
