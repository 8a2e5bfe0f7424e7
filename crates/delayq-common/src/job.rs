//! The job record and its retry arithmetic.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::name::{Group, JobId, Topic};
use crate::state::JobState;
use crate::time::Timestamp;

/// A job as delayq keeps it: what the client pushed plus where it is in its life.
///
/// Serialized with camelCase names and durations in milliseconds, the shape
/// every face (REST, gRPC, webhooks) shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    /// Unique among live jobs.
    pub id: JobId,
    /// The queue the job belongs to.
    pub topic: Topic,
    /// Routing key or Kafka key when forwarded.
    pub subtopic: Option<String>,
    /// The payload, opaque to delayq.
    pub body: String,
    /// The business key; `(topic, biz_key)` is unique among live jobs.
    pub biz_key: Option<String>,
    /// When the job was created (client-given for mykit clients).
    pub create_time: Timestamp,
    /// The delay the client asked for (kept for mykit-style listings).
    #[serde(with = "duration_ms")]
    pub delay: Duration,
    /// When the job is (or was) due; moved by nack and redelivery.
    pub run_at: Timestamp,
    /// Time to run after a pop before the job is delivered again.
    #[serde(with = "duration_ms")]
    pub ttr: Duration,
    /// 0 (most urgent) to 4.
    pub priority: u8,
    /// Deliveries allowed after the first.
    pub max_retries: u32,
    /// Delays before the n-th redelivery after a nack; empty means the configured default.
    #[serde(with = "durations_ms")]
    pub retry_backoff: Vec<Duration>,
    /// How long a due job may wait unpopped before it expires; zero means never.
    #[serde(with = "duration_ms")]
    pub ttl: Duration,
    /// The consumer groups of its topic it is delivered to; empty means
    /// every group declared when it falls due.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Group>,
    /// The number of the current (or next) delivery, starting at 1.
    pub attempt: u32,
    /// Where the job is in its life.
    pub state: JobState,
    /// What the consumer reported when finishing it.
    pub result: Option<String>,
    /// When the state last changed.
    pub updated_at: Timestamp,
}

/// The default backoff for nacked jobs that carry none of their own:
/// `base * 2^(n-1)` before the n-th redelivery, capped at `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The delay before the first redelivery.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy { base: Duration::from_secs(1), max: Duration::from_secs(3600) }
    }
}

impl RetryPolicy {
    /// Returns the delay before redelivery number `redelivery` (1-based).
    pub fn exponential(&self, redelivery: u32) -> Duration {
        let doublings = redelivery.saturating_sub(1).min(32);
        let factor = 1u64 << doublings;
        let millis = (self.base.as_millis() as u64).saturating_mul(factor);
        Duration::from_millis(millis).min(self.max)
    }
}

impl Job {
    /// Returns whether another delivery is allowed after the current attempt.
    pub fn has_retries_left(&self) -> bool {
        Job::retries_left(self.attempt, self.max_retries)
    }

    /// Returns whether a job on delivery `attempt` that allows `max_retries`
    /// may be delivered again ([`Job::has_retries_left`], for a holder of the two numbers alone).
    pub fn retries_left(attempt: u32, max_retries: u32) -> bool {
        // attempt counts deliveries (1-based); retries used so far = attempt - 1.
        attempt.saturating_sub(1) < max_retries
    }

    /// Returns the delay before the next redelivery after a nack of the current attempt.
    pub fn backoff(&self, default: &RetryPolicy) -> Duration {
        let redelivery = self.attempt.max(1);
        let Some(last) = self.retry_backoff.last() else {
            return default.exponential(redelivery);
        };
        // Redeliveries past the end of the list keep its last delay.
        let index = usize::try_from(redelivery - 1).unwrap_or(usize::MAX);
        *self.retry_backoff.get(index).unwrap_or(last)
    }

    /// Returns when this job expires if it is still unpopped, if it has a ttl.
    pub fn expires_at(&self) -> Option<Timestamp> {
        Job::expiry(self.run_at, self.ttl)
    }

    /// Returns when a job due at `run_at` with `ttl` expires if still unpopped
    /// ([`Job::expires_at`], for a holder of the two values alone).
    pub fn expiry(run_at: Timestamp, ttl: Duration) -> Option<Timestamp> {
        (!ttl.is_zero()).then(|| run_at.plus(ttl))
    }

    /// Returns the job without its payload: the body, subtopic, business key,
    /// asked-for delay, backoff list, groups and result, which only a consumer, a
    /// listing or a nack reads. What is left orders the job, hands it out and
    /// moves it through its states.
    pub fn without_payload(self) -> Job {
        Job {
            subtopic: None,
            body: String::new(),
            biz_key: None,
            delay: Duration::ZERO,
            retry_backoff: Vec::new(),
            groups: Vec::new(),
            result: None,
            ..self
        }
    }

    /// Shows a group's delivery as clients know it: takes the id and topic of
    /// its job and returns its group; a job that is no delivery is left as it
    /// is (`None`). Deliveries are kept under names no client can give
    /// ([`JobId::for_group`]), which no answer may show.
    pub fn show_as_job(&mut self) -> Option<Group> {
        let (id, group) = self.id.group_parts()?;
        self.id = id;
        if let Some((topic, _)) = self.topic.group_parts() {
            self.topic = topic;
        }
        Some(group)
    }

    /// Returns the job with what changes while it is live (its state, attempt,
    /// due time and last change) taken from `live`, the same job as the
    /// scheduler holds it.
    pub fn with_live_state(self, live: &Job) -> Job {
        Job { state: live.state, attempt: live.attempt, run_at: live.run_at, updated_at: live.updated_at, ..self }
    }
}

/// Serde for a `Duration` as integer milliseconds.
pub mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes as milliseconds.
    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.as_millis() as u64)
    }

    /// Deserializes from milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// Serde for a list of `Duration`s as integer milliseconds.
pub mod durations_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes as a list of milliseconds.
    pub fn serialize<S: Serializer>(values: &[Duration], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(values.iter().map(|value| value.as_millis() as u64))
    }

    /// Deserializes from a list of milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Duration>, D::Error> {
        Vec::<u64>::deserialize(deserializer).map(|values| values.into_iter().map(Duration::from_millis).collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_job() -> Job {
        Job {
            id: JobId::parse("1").unwrap(),
            topic: Topic::parse("t").unwrap(),
            subtopic: None,
            body: "b".into(),
            biz_key: None,
            create_time: Timestamp::from_millis(1_000),
            delay: Duration::ZERO,
            run_at: Timestamp::from_millis(1_000),
            ttr: Duration::from_secs(30),
            priority: 1,
            max_retries: 2,
            retry_backoff: Vec::new(),
            ttl: Duration::ZERO,
            attempt: 1,
            state: JobState::Delay,
            result: None,
            updated_at: Timestamp::from_millis(1_000),
            groups: Vec::new(),
        }
    }

    #[test]
    fn retries_count_deliveries_after_the_first() {
        let mut job = sample_job();
        assert!(job.has_retries_left());
        job.attempt = 2;
        assert!(job.has_retries_left());
        job.attempt = 3;
        assert!(!job.has_retries_left(), "max_retries = 2 allows attempts 1, 2 and 3");
        job.max_retries = 0;
        job.attempt = 1;
        assert!(!job.has_retries_left());
    }

    #[test]
    fn explicit_backoff_repeats_its_last_entry() {
        let mut job = sample_job();
        job.retry_backoff = vec![Duration::from_millis(100), Duration::from_millis(500)];
        let policy = RetryPolicy::default();
        let delays: Vec<u64> = [0, 1, 2, 3, 4, u32::MAX]
            .into_iter()
            .map(|attempt| {
                job.attempt = attempt;
                job.backoff(&policy).as_millis() as u64
            })
            .collect();
        assert_eq!(delays, [100, 100, 500, 500, 500, 500]);
    }

    #[test]
    fn default_backoff_is_exponential_and_capped() {
        let policy = RetryPolicy { base: Duration::from_millis(100), max: Duration::from_millis(1_000) };
        let delays: Vec<u64> = (1..=6).map(|n| policy.exponential(n).as_millis() as u64).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(policy.exponential(u32::MAX), Duration::from_millis(1_000));
    }

    #[test]
    fn serializes_camel_case_with_milliseconds() {
        let value = serde_json::to_value(sample_job()).unwrap();
        assert_eq!(value["runAt"], 1_000);
        assert_eq!(value["ttr"], 30_000);
        assert_eq!(value["state"], "delay");
        assert_eq!(value["bizKey"], serde_json::Value::Null);
        let back: Job = serde_json::from_value(value).unwrap();
        assert_eq!(back, sample_job());
    }
}
