//! Jobs filled with plain test values, for the tests and conformance suites of
//! the crates that store and schedule them.
//!
//! The builder lives here rather than on [`Job`] in `delayq-common`: that crate
//! is part of the server, and a job whose values no client asked for has no
//! place in it. The crates that store and schedule jobs already depend on this
//! one for their tests and conformance suites, so those share one notion of a
//! plain job. A test that needs another value sets that field on the result.

use std::time::Duration;

use delayq_common::{Job, JobDefaults, JobId, JobState, Timestamp, Topic};

/// Returns job `id` of `topic`, created now and waiting for `run_at`: see
/// [`job_created_at`].
///
/// # Panics
/// When `id` is not a valid job id.
#[track_caller]
pub fn job(id: &str, topic: &Topic, run_at: Timestamp) -> Job {
    job_created_at(id, topic, Timestamp::now(), run_at)
}

/// Returns job `id` of `topic`, created at `created` and waiting for `run_at`,
/// as a plain push makes it: the server's default ttr, priority and retries,
/// no ttl, subtopic, business key or backoff of its own, first attempt. Its
/// body names its id, so jobs of one test differ.
///
/// # Panics
/// When `id` is not a valid job id.
#[track_caller]
pub fn job_created_at(id: &str, topic: &Topic, created: Timestamp, run_at: Timestamp) -> Job {
    let defaults = JobDefaults::default();
    Job {
        id: job_id(id),
        topic: topic.clone(),
        subtopic: None,
        body: format!("body of {id}"),
        biz_key: None,
        create_time: created,
        delay: run_at.since(created),
        run_at,
        ttr: defaults.ttr,
        priority: defaults.priority,
        max_retries: defaults.max_retries,
        retry_backoff: Vec::new(),
        ttl: Duration::ZERO,
        attempt: 1,
        state: JobState::Delay,
        result: None,
        updated_at: created,
        groups: Vec::new(),
    }
}

/// Parses an id the test chose.
///
/// # Panics
/// When `id` is not a valid job id: the test itself is wrong.
#[track_caller]
#[allow(clippy::panic, reason = "an id a test chose is valid, or the test is wrong")]
pub fn job_id(id: &str) -> JobId {
    JobId::parse(id).unwrap_or_else(|invalid| panic!("test id {id:?}: {invalid}"))
}

/// Parses a topic name the test chose.
///
/// # Panics
/// When `name` is not a valid topic: the test itself is wrong.
#[track_caller]
#[allow(clippy::panic, reason = "a topic a test chose is valid, or the test is wrong")]
pub fn topic(name: &str) -> Topic {
    Topic::parse(name).unwrap_or_else(|invalid| panic!("test topic {name:?}: {invalid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_job_waits_with_the_push_defaults() {
        let created = Timestamp::from_millis(1_000);
        let job = job_created_at("j1", &topic("t"), created, Timestamp::from_millis(61_000));
        assert_eq!(job.delay, Duration::from_secs(60));
        assert_eq!((job.state, job.attempt), (JobState::Delay, 1));
        let defaults = JobDefaults::default();
        assert_eq!((job.ttr, job.priority, job.max_retries), (defaults.ttr, defaults.priority, defaults.max_retries));
        assert_eq!(job.body, "body of j1");
    }

    #[test]
    fn a_due_time_before_creation_is_no_delay() {
        let job = job_created_at("j2", &topic("t"), Timestamp::from_millis(5_000), Timestamp::EPOCH);
        assert_eq!(job.delay, Duration::ZERO);
    }
}
