//! Parsing and validating a push request, field by field, so that every
//! refusal names the offending field.
//!
//! A push arrives as a [`PushInput`], typed but unchecked: the REST face reads
//! it from a JSON object (rather than deriving it with serde, so that a wrong
//! type still gets a message naming the field, `"delay must be an integer"`),
//! the gRPC face fills it from its message. [`PushRequest::validate`] then
//! checks it the same way for both. Unknown JSON fields are ignored and `null`
//! counts as absent: mykit-style clients send both.

use std::time::Duration;

use serde_json::Value;

use crate::error::InvalidField;
use crate::job::Job;
use crate::name::{Group, JobId, Topic};
use crate::state::JobState;
use crate::time::Timestamp;

mod checks;
mod input;

use self::checks::{non_negative, required};
pub use self::input::PushInput;

/// The default largest body, in bytes.
pub const DEFAULT_MAX_BODY_BYTES: usize = 65_536;
/// The default longest delay: two years.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_millis(2 * 365 * 24 * 3600 * 1000);
/// The shortest ttr accepted.
pub const MIN_TTR: Duration = Duration::from_millis(100);
/// The longest ttr accepted: one day.
pub const MAX_TTR: Duration = Duration::from_millis(86_400_000);
/// The least urgent priority (0 is the most urgent).
pub const MAX_PRIORITY: u8 = 4;
/// The largest `maxRetries` accepted.
pub const MAX_RETRIES_LIMIT: u64 = 100_000;
/// The most entries a `retryBackoff` list may have.
pub const MAX_BACKOFF_ENTRIES: usize = 100;
/// The most consumer groups one push may name.
pub const MAX_PUSH_GROUPS: usize = 64;
/// The longest business key or subtopic, in characters.
pub const MAX_KEY_CHARS: usize = 128;

/// The size limits a push is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest `body`, in bytes (413 above it).
    pub max_body_bytes: usize,
    /// The longest `delay`, and how far in the future `runAt` may be.
    pub max_delay: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_body_bytes: DEFAULT_MAX_BODY_BYTES, max_delay: DEFAULT_MAX_DELAY }
    }
}

/// The values a job gets for the options its push left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobDefaults {
    /// The default time-to-run.
    pub ttr: Duration,
    /// The default priority.
    pub priority: u8,
    /// The default number of redeliveries.
    pub max_retries: u32,
}

impl Default for JobDefaults {
    fn default() -> JobDefaults {
        JobDefaults { ttr: Duration::from_secs(30), priority: 1, max_retries: 10 }
    }
}

/// The unit of the `delay` and `ttr` fields: milliseconds on the main API,
/// seconds on the Youzan-style `topic/{topic}/job` routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// Integer milliseconds.
    Millis,
    /// Integer seconds.
    Seconds,
}

impl TimeUnit {
    fn to_duration(self, amount: u64) -> Duration {
        match self {
            TimeUnit::Millis => Duration::from_millis(amount),
            TimeUnit::Seconds => Duration::from_secs(amount),
        }
    }

    fn describe(self, duration: Duration) -> String {
        match self {
            TimeUnit::Millis => format!("{} ms", duration.as_millis()),
            TimeUnit::Seconds => format!("{} s", duration.as_millis().div_ceil(1000)),
        }
    }
}

/// When a pushed job falls due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// `createTime` (or now) plus a delay.
    Delay(Duration),
    /// An absolute instant.
    RunAt(Timestamp),
}

/// A validated push: every field checked, defaults not yet applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushRequest {
    /// The client's id, if it gave one.
    pub id: Option<JobId>,
    /// The topic.
    pub topic: Topic,
    /// The payload.
    pub body: String,
    /// When the job falls due.
    pub due: Due,
    /// The client's creation time, if it gave one.
    pub create_time: Option<Timestamp>,
    /// Time to run.
    pub ttr: Option<Duration>,
    /// Priority, 0 most urgent.
    pub priority: Option<u8>,
    /// Redeliveries allowed after the first.
    pub max_retries: Option<u32>,
    /// Per-job nack backoff.
    pub retry_backoff: Vec<Duration>,
    /// Time to live once due; zero means never.
    pub ttl: Duration,
    /// Routing key when forwarded.
    pub subtopic: Option<String>,
    /// Business key.
    pub biz_key: Option<String>,
    /// Whether a live job with the same id or business key is updated in place.
    pub replace: bool,
    /// The consumer groups to deliver to; empty means every group of the topic.
    pub groups: Vec<Group>,
}

impl PushRequest {
    /// Validates one push, given as a JSON object.
    ///
    /// # Errors
    /// A field of the wrong JSON type, or the first invalid field, with a
    /// message naming it; a body over the limit is a size error.
    pub fn from_json(
        value: &Value,
        unit: TimeUnit,
        limits: &Limits,
        now: Timestamp,
    ) -> Result<PushRequest, InvalidField> {
        PushRequest::validate(PushInput::from_json(value)?, unit, limits, now)
    }

    /// Validates one push as the client sent it, whichever face it came through.
    ///
    /// # Errors
    /// The first invalid field, with a message naming it; a body over the
    /// limit is a size error.
    pub fn validate(
        input: PushInput,
        unit: TimeUnit,
        limits: &Limits,
        now: Timestamp,
    ) -> Result<PushRequest, InvalidField> {
        let topic = Topic::parse(required("topic", input.topic)?)?;
        let id = input.id.map(JobId::parse).transpose()?;
        let body = required("body", input.body)?;
        if body.len() > limits.max_body_bytes {
            return Err(InvalidField::too_large("body", format!("must be at most {} bytes", limits.max_body_bytes)));
        }
        let (due, create_time) = checks::due([input.delay, input.run_at, input.create_time], unit, limits, now)?;
        let ttr = non_negative("ttr", input.ttr)?.map(|amount| unit.to_duration(amount));
        if let Some(ttr) = ttr {
            if !(MIN_TTR..=MAX_TTR).contains(&ttr) {
                return Err(InvalidField::new(
                    "ttr",
                    format!("must be from {} to {}", unit.describe(MIN_TTR), unit.describe(MAX_TTR)),
                ));
            }
        }
        let priority = non_negative("priority", input.priority)?;
        if priority.is_some_and(|priority| priority > u64::from(MAX_PRIORITY)) {
            return Err(InvalidField::new("priority", format!("must be from 0 to {MAX_PRIORITY}")));
        }
        let max_retries = non_negative("maxRetries", input.max_retries)?;
        if max_retries.is_some_and(|retries| retries > MAX_RETRIES_LIMIT) {
            return Err(InvalidField::new("maxRetries", format!("must be at most {MAX_RETRIES_LIMIT}")));
        }
        let retry_backoff = checks::backoff_list("retryBackoff", input.retry_backoff, limits)?;
        let ttl = Duration::from_millis(non_negative("ttl", input.ttl)?.unwrap_or(0));
        if ttl > limits.max_delay {
            return Err(InvalidField::new("ttl", format!("must be at most {} ms", limits.max_delay.as_millis())));
        }
        let subtopic = checks::key("subtopic", input.subtopic, 0)?.filter(|subtopic| !subtopic.is_empty());
        let biz_key = checks::key("bizKey", input.biz_key, 1)?;
        let groups = checks::groups(input.groups)?;
        Ok(PushRequest {
            id,
            topic,
            body,
            due,
            create_time,
            ttr,
            priority: priority.map(|priority| priority as u8),
            max_retries: max_retries.map(|retries| retries as u32),
            retry_backoff,
            ttl,
            subtopic,
            biz_key,
            replace: input.replace.unwrap_or(false),
            groups,
        })
    }

    /// Returns the due time of this push as of `now`.
    pub fn run_at(&self, now: Timestamp) -> Timestamp {
        match self.due {
            Due::Delay(delay) => self.create_time.unwrap_or(now).plus(delay),
            Due::RunAt(run_at) => run_at,
        }
    }

    /// Builds the job this push creates, with the given id and defaults.
    pub fn into_job(self, id: JobId, now: Timestamp, defaults: &JobDefaults) -> Job {
        let run_at = self.run_at(now);
        let create_time = self.create_time.unwrap_or(now);
        let delay = match self.due {
            Due::Delay(delay) => delay,
            Due::RunAt(_) => run_at.since(create_time),
        };
        let state = if run_at <= now { JobState::Ready } else { JobState::Delay };
        Job {
            id,
            topic: self.topic,
            subtopic: self.subtopic,
            body: self.body,
            biz_key: self.biz_key,
            create_time,
            delay,
            run_at,
            ttr: self.ttr.unwrap_or(defaults.ttr),
            priority: self.priority.unwrap_or(defaults.priority),
            max_retries: self.max_retries.unwrap_or(defaults.max_retries),
            retry_backoff: self.retry_backoff,
            ttl: self.ttl,
            attempt: 1,
            state,
            result: None,
            updated_at: now,
            groups: self.groups,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    fn parse(value: Value) -> Result<PushRequest, InvalidField> {
        PushRequest::from_json(&value, TimeUnit::Millis, &Limits::default(), NOW)
    }

    fn refusal(value: Value) -> String {
        parse(value).expect_err("must be refused").to_string()
    }

    #[test]
    fn minimal_push_gets_the_defaults() {
        let request = parse(json!({"topic": "t", "body": "b"})).unwrap();
        let job = request.into_job(JobId::parse("9").unwrap(), NOW, &JobDefaults::default());
        assert_eq!(job.run_at, NOW);
        assert_eq!(job.state, JobState::Ready);
        assert_eq!(job.ttr, Duration::from_secs(30));
        assert_eq!(job.priority, 1);
        assert_eq!(job.max_retries, 10);
        assert_eq!(job.attempt, 1);
        assert_eq!(job.ttl, Duration::ZERO);
    }

    #[test]
    fn groups_are_checked_by_name_sorted_and_kept_on_the_job() {
        let request = parse(json!({"topic": "t", "body": "b", "groups": ["b", "a", "b"]})).unwrap();
        let job = request.into_job(JobId::parse("9").unwrap(), NOW, &JobDefaults::default());
        let names: Vec<&str> = job.groups.iter().map(Group::as_str).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "groups": "a"})), "groups must be an array of strings");
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "groups": [1]})), "groups entries must be strings");
        assert_eq!(
            refusal(json!({"topic": "t", "body": "b", "groups": ["a/b"]})),
            "groups may only contain A-Z a-z 0-9 . _ : -"
        );
        let many: Vec<String> = (0..=MAX_PUSH_GROUPS).map(|n| format!("g{n}")).collect();
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "groups": many})), "groups must name at most 64 groups");
    }

    #[test]
    fn topic_is_required_and_checked() {
        assert_eq!(refusal(json!({"body": "b"})), "topic is required");
        assert_eq!(refusal(json!({"topic": "", "body": "b"})), "topic must not be empty");
        assert_eq!(refusal(json!({"topic": "a b", "body": "b"})), "topic may only contain A-Z a-z 0-9 . _ : -");
        assert_eq!(refusal(json!({"topic": "a".repeat(129), "body": "b"})), "topic must be at most 128 characters");
        assert_eq!(refusal(json!({"topic": 5, "body": "b"})), "topic must be a string");
        assert!(parse(json!({"topic": "a".repeat(128), "body": "b"})).is_ok());
    }

    #[test]
    fn id_is_optional_and_checked() {
        assert!(parse(json!({"topic": "t", "body": "b", "id": "order-1:x.y_z"})).is_ok());
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "id": "a/b"})), "id may only contain A-Z a-z 0-9 . _ : -");
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "id": ""})), "id must not be empty");
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "id": 12})), "id must be a string");
    }

    #[test]
    fn body_is_required_and_bounded() {
        assert_eq!(refusal(json!({"topic": "t"})), "body is required");
        assert_eq!(refusal(json!({"topic": "t", "body": {"a": 1}})), "body must be a string");
        let too_big = parse(json!({"topic": "t", "body": "x".repeat(65_537)})).unwrap_err();
        assert!(too_big.too_large);
        assert_eq!(too_big.to_string(), "body must be at most 65536 bytes");
        assert!(parse(json!({"topic": "t", "body": "x".repeat(65_536)})).is_ok());
        assert!(parse(json!({"topic": "t", "body": ""})).is_ok());
    }

    #[test]
    fn delay_rules() {
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "delay": -1})), "delay must be >= 0");
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "delay": 1.5})), "delay must be an integer");
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "delay": "10"})), "delay must be an integer");
        let two_years = DEFAULT_MAX_DELAY.as_millis() as u64;
        assert!(parse(json!({"topic": "t", "body": "b", "delay": two_years})).is_ok());
        assert_eq!(
            refusal(json!({"topic": "t", "body": "b", "delay": two_years + 1})),
            format!("delay must be at most {two_years} ms")
        );
        let request = parse(json!({"topic": "t", "body": "b", "delay": 1_500})).unwrap();
        assert_eq!(request.run_at(NOW).as_millis(), NOW.as_millis() + 1_500);
        let nulls = parse(json!({"topic": "t", "body": "b", "delay": null, "ttr": null})).unwrap();
        assert_eq!(nulls.due, Due::Delay(Duration::ZERO));
    }

    #[test]
    fn create_time_plus_delay_is_the_due_time() {
        let request = parse(json!({"topic": "t", "body": "b", "delay": 1_000, "createTime": 5_000})).unwrap();
        assert_eq!(request.run_at(NOW).as_millis(), 6_000);
        let job = request.into_job(JobId::parse("1").unwrap(), NOW, &JobDefaults::default());
        assert_eq!(job.state, JobState::Ready, "a past due time is due at once");
        assert_eq!(job.create_time.as_millis(), 5_000);
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "createTime": -5})), "createTime must be >= 0");
    }

    #[test]
    fn run_at_rules() {
        let future = NOW.as_millis() + 60_000;
        let request = parse(json!({"topic": "t", "body": "b", "runAt": future})).unwrap();
        assert_eq!(request.run_at(NOW).as_millis(), future);
        let job = request.into_job(JobId::parse("1").unwrap(), NOW, &JobDefaults::default());
        assert_eq!(job.state, JobState::Delay);
        assert_eq!(job.delay, Duration::from_millis(60_000));
        let past = parse(json!({"topic": "t", "body": "b", "runAt": 1})).unwrap();
        assert_eq!(past.into_job(JobId::parse("1").unwrap(), NOW, &JobDefaults::default()).state, JobState::Ready);
        assert_eq!(
            refusal(json!({"topic": "t", "body": "b", "runAt": future, "delay": 5})),
            "runAt must not be given together with delay"
        );
        assert!(refusal(json!({"topic": "t", "body": "b", "runAt": NOW.as_millis() * 3}))
            .starts_with("runAt must be at most"));
    }

    #[test]
    fn ttr_rules() {
        assert!(parse(json!({"topic": "t", "body": "b", "ttr": 100})).is_ok());
        assert!(parse(json!({"topic": "t", "body": "b", "ttr": 86_400_000})).is_ok());
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "ttr": 99})), "ttr must be from 100 ms to 86400000 ms");
        assert_eq!(
            refusal(json!({"topic": "t", "body": "b", "ttr": 86_400_001})),
            "ttr must be from 100 ms to 86400000 ms"
        );
    }

    #[test]
    fn priority_rules() {
        for priority in 0..=4 {
            assert!(parse(json!({"topic": "t", "body": "b", "priority": priority})).is_ok());
        }
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "priority": 5})), "priority must be from 0 to 4");
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "priority": -1})), "priority must be >= 0");
    }

    #[test]
    fn retry_rules() {
        let request = parse(json!({"topic": "t", "body": "b", "maxRetries": 0, "retryBackoff": [100, 200]})).unwrap();
        assert_eq!(request.max_retries, Some(0));
        assert_eq!(request.retry_backoff, vec![Duration::from_millis(100), Duration::from_millis(200)]);
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "maxRetries": -2})), "maxRetries must be >= 0");
        assert_eq!(
            refusal(json!({"topic": "t", "body": "b", "maxRetries": 100_001})),
            "maxRetries must be at most 100000"
        );
        assert_eq!(
            refusal(json!({"topic": "t", "body": "b", "retryBackoff": 5})),
            "retryBackoff must be an array of integer milliseconds"
        );
        assert_eq!(
            refusal(json!({"topic": "t", "body": "b", "retryBackoff": [1, -1]})),
            "retryBackoff entries must be integers >= 0"
        );
    }

    #[test]
    fn ttl_subtopic_biz_key_replace_and_status() {
        let request = parse(json!({
            "topic": "t", "body": "b", "ttl": 5_000, "subtopic": "eu", "bizKey": "order-1",
            "replace": true, "status": 3
        }))
        .unwrap();
        assert_eq!(request.ttl, Duration::from_millis(5_000));
        assert_eq!(request.subtopic.as_deref(), Some("eu"));
        assert_eq!(request.biz_key.as_deref(), Some("order-1"));
        assert!(request.replace);
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "ttl": -1})), "ttl must be >= 0");
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "bizKey": ""})), "bizKey must be 1-128 characters");
        assert_eq!(
            refusal(json!({"topic": "t", "body": "b", "bizKey": "k".repeat(129)})),
            "bizKey must be 1-128 characters"
        );
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "replace": "yes"})), "replace must be true or false");
        assert_eq!(refusal(json!({"topic": "t", "body": "b", "subtopic": 1})), "subtopic must be a string");
    }

    #[test]
    fn seconds_unit_for_youzan_routes() {
        let request = PushRequest::from_json(
            &json!({"topic": "t", "body": "b", "delay": 3, "ttr": 5}),
            TimeUnit::Seconds,
            &Limits::default(),
            NOW,
        )
        .unwrap();
        assert_eq!(request.due, Due::Delay(Duration::from_secs(3)));
        assert_eq!(request.ttr, Some(Duration::from_secs(5)));
        let refused = PushRequest::from_json(
            &json!({"topic": "t", "body": "b", "ttr": 0}),
            TimeUnit::Seconds,
            &Limits::default(),
            NOW,
        )
        .unwrap_err();
        assert_eq!(refused.to_string(), "ttr must be from 1 s to 86400 s");
    }

    #[test]
    fn not_an_object() {
        assert_eq!(refusal(json!([1, 2])), "job must be a JSON object");
    }
}
