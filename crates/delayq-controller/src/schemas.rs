//! Schemas of the OpenAPI document for what the handlers read or write
//! through other code: JSON bodies (read as maps and validated by
//! `PushRequest`), the refusal envelope and the job as `delayq-common`
//! serializes it (that crate stays free of HTTP concerns).
//!
//! None of these types is ever built: each only names a shape for the
//! document. The tests below compare them with the code they describe where
//! the two could drift apart.

use std::borrow::Cow;

use delayq_common::JobState;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// One of the [states](JobState::ALL) of a job.
pub(crate) enum JobStateSchema {}

impl PartialSchema for JobStateSchema {
    fn schema() -> RefOr<Schema> {
        let states = JobState::ALL.iter().map(|state| state.as_str());
        let object = ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("where the job is in its life; delay, ready and reserved are live"))
            .enum_values(Some(states))
            .build();
        RefOr::T(Schema::Object(object))
    }
}

impl ToSchema for JobStateSchema {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("JobState")
    }
}

/// `{"success": false, "message": …, "data": null}`: a refused request.
pub(crate) enum Refusal {}

impl PartialSchema for Refusal {
    fn schema() -> RefOr<Schema> {
        let object = ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some("a refused request; it changed nothing"))
            .property("success", ObjectBuilder::new().schema_type(Type::Boolean).enum_values(Some([false])))
            .property("message", message_schema())
            .property("data", ObjectBuilder::new().schema_type(Type::Null))
            .required("success")
            .required("message")
            .required("data")
            .build();
        RefOr::T(Schema::Object(object))
    }
}

fn message_schema() -> ObjectBuilder {
    let description = "what went wrong, naming the field or parameter; never internal detail";
    ObjectBuilder::new().schema_type(Type::String).description(Some(description))
}

impl ToSchema for Refusal {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Refusal")
    }
}

/// A job with every field, as `GET /jobs/{id}` and the listings show it.
#[derive(ToSchema)]
#[schema(as = Job, rename_all = "camelCase")]
#[allow(dead_code, reason = "never built: describes how `delayq_common::Job` serializes")]
pub(crate) struct JobSchema {
    /// The job's id.
    id: String,
    /// The topic.
    topic: String,
    /// Routing key or Kafka key when forwarded.
    subtopic: Option<String>,
    /// The payload, as pushed.
    body: String,
    /// The business key.
    biz_key: Option<String>,
    /// The push's `createTime`, else the time of the push (epoch ms).
    create_time: u64,
    /// The delay asked for, in ms (for a `runAt` push: `runAt − createTime`).
    delay: u64,
    /// The current due time (epoch ms), moved by nacks and redeliveries.
    run_at: u64,
    /// Time to run after a pop, in ms.
    ttr: u64,
    /// 0 (most urgent) to 4.
    priority: u8,
    /// Deliveries allowed after the first.
    max_retries: u32,
    /// Delays in ms before the n-th redelivery after a nack; empty means the server's backoff.
    retry_backoff: Vec<u64>,
    /// How long a due job may wait unpopped before it expires, in ms; 0 is never.
    ttl: u64,
    /// The consumer groups the push named, by name; absent when it named none (every
    /// group of the topic).
    groups: Option<Vec<String>>,
    /// The number of the current (or next) delivery, from 1.
    attempt: u32,
    /// The job's state.
    state: JobStateSchema,
    /// What `/finish` stored.
    result: Option<String>,
    /// When the state last changed (epoch ms).
    updated_at: u64,
}

/// The fields of a push: a JSON object. `null` counts as absent, unknown
/// fields are ignored, numbers must be integers.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code, reason = "never built: `PushRequest::from_json` reads these fields from a map")]
pub(crate) struct PushBody {
    /// The topic.
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    topic: String,
    /// The job's id; generated (a snowflake, as a decimal string) when absent. Must not be
    /// the id of a live job; the id of an ended job may be used again.
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    id: Option<String>,
    /// The payload, at most `limits.max_body_bytes` bytes (else 413); may be empty.
    body: String,
    /// Milliseconds until the job is due, counted from `createTime`; not together with `runAt`.
    #[schema(minimum = 0, default = 0)]
    delay: Option<u64>,
    /// The absolute due time (epoch ms); a past one is due at once; not together with `delay`.
    run_at: Option<u64>,
    /// Epoch ms the `delay` counts from (mykit semantics); now when absent.
    create_time: Option<u64>,
    /// Time to run after a pop before the job is delivered again, in ms; `jobs.ttr_ms` when absent.
    #[schema(minimum = 100, maximum = 86_400_000)]
    ttr: Option<u64>,
    /// 0 (most urgent) to 4; `jobs.priority` when absent.
    #[schema(minimum = 0, maximum = 4)]
    priority: Option<u8>,
    /// Deliveries allowed after the first; `jobs.max_retries` when absent.
    #[schema(minimum = 0, maximum = 100_000)]
    max_retries: Option<u32>,
    /// Delays in ms before the n-th redelivery after a nack; the last repeats; empty is the
    /// server's exponential backoff.
    #[schema(max_items = 100)]
    retry_backoff: Option<Vec<u64>>,
    /// A job still ready this many ms after its due time expires; 0 is never.
    #[schema(minimum = 0, default = 0)]
    ttl: Option<u64>,
    /// Routing key or Kafka key when forwarded; `""` counts as none.
    #[schema(max_length = 128)]
    subtopic: Option<String>,
    /// Business key: `(topic, bizKey)` is unique among live jobs.
    #[schema(min_length = 1, max_length = 128)]
    biz_key: Option<String>,
    /// Update the live job with this id or business key in place, if it is waiting.
    #[schema(default = false)]
    replace: Option<bool>,
    /// On a topic with consumer groups: deliver the job only to those of these groups
    /// declared when it falls due (each name like a topic's); absent or empty, to every
    /// group declared then.
    #[schema(max_items = 64)]
    groups: Option<Vec<String>>,
}

/// A Youzan push: the fields of a push with `delay` and `ttr` in seconds, and
/// `topic` optional (when given it must be the path's).
pub(crate) enum YouzanPushBody {}

impl PartialSchema for YouzanPushBody {
    fn schema() -> RefOr<Schema> {
        let RefOr::T(Schema::Object(mut object)) = PushBody::schema() else {
            return PushBody::schema();
        };
        object.required.retain(|field| field != "topic");
        let in_seconds = [
            ("delay", "Seconds until the job is due, counted from `createTime`; not together with `runAt`.", None),
            ("ttr", "Time to run after a pop before the job is delivered again, in seconds.", Some((1, 86_400))),
        ];
        for (field, description, range) in in_seconds {
            if let Some(RefOr::T(Schema::Object(property))) = object.properties.get_mut(field) {
                property.description = Some(description.to_owned());
                if let Some((minimum, maximum)) = range {
                    property.minimum = Some(minimum.into());
                    property.maximum = Some(maximum.into());
                }
            }
        }
        object.description = Some(Self::DESCRIPTION.to_owned());
        RefOr::T(Schema::Object(object))
    }
}

impl YouzanPushBody {
    const DESCRIPTION: &'static str = "The fields of a push, with `delay` and `ttr` in seconds; `topic` may be \
        left out and must be the path's when given. `runAt`, `createTime`, `ttl` and `retryBackoff` stay in ms.";
}

impl ToSchema for YouzanPushBody {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("YouzanPush")
    }
}

/// `{"jobs": [ … ]}`: up to 1000 pushes, each judged alone; other keys are ignored.
#[derive(ToSchema)]
#[allow(dead_code, reason = "never built: `parse_batch` reads the body entry by entry")]
pub(crate) struct BatchBody {
    /// The pushes.
    #[schema(max_items = 1000)]
    jobs: Vec<PushBody>,
}

/// An optional body of a finish: empty, or an object whose `result` is stored
/// with the job; other keys are ignored.
#[derive(ToSchema)]
#[allow(dead_code, reason = "never built: `finish_result` reads `result` from a map")]
pub(crate) struct FinishBody {
    /// What to store with the job, at most `limits.max_result_bytes` bytes (else 413).
    result: Option<String>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use delayq_common::{Limits, PushRequest, TimeUnit, Timestamp};
    use serde_json::{json, Value};
    use utoipa::openapi::schema::Object;

    use super::*;

    /// The pattern every job id and topic matches.
    const NAME_PATTERN: &str = "^[A-Za-z0-9._:-]+$";

    fn object_of(schema: RefOr<Schema>) -> Object {
        match schema {
            RefOr::T(Schema::Object(object)) => object,
            _ => panic!("not an object schema"),
        }
    }

    fn properties(schema: RefOr<Schema>) -> BTreeSet<String> {
        object_of(schema).properties.into_keys().collect()
    }

    #[test]
    fn the_job_schema_has_the_fields_a_job_serializes() {
        let mut job = delayq_testkit::job("j", &delayq_testkit::topic("t"), Timestamp::now());
        // Serialized only when the push named some.
        job.groups = vec![delayq_common::Group::parse("billing").unwrap()];
        let Ok(Value::Object(serialized)) = serde_json::to_value(job) else { panic!("a job is an object") };
        let fields: BTreeSet<String> = serialized.into_iter().map(|(name, _)| name).collect();
        assert_eq!(properties(JobSchema::schema()), fields);
    }

    #[test]
    fn the_state_schema_lists_every_state_as_it_serializes() {
        let listed = object_of(JobStateSchema::schema()).enum_values.unwrap();
        let serialized: Vec<Value> = JobState::ALL.iter().map(|state| serde_json::to_value(state).unwrap()).collect();
        assert!(listed == serialized, "{listed:?} against {serialized:?}");
    }

    /// Every documented push field is read by the parser: a value of the wrong
    /// type is refused naming it, where an unread field would be ignored.
    #[test]
    fn every_push_field_is_read_by_the_parser() {
        let fields = properties(PushBody::schema());
        assert!(fields.contains("bizKey") && fields.contains("retryBackoff"), "{fields:?}");
        for field in fields {
            let mut push = json!({"topic": "t", "body": "b"});
            push[&field] = json!({"wrong": "type"});
            let refusal = PushRequest::from_json(&push, TimeUnit::Millis, &Limits::default(), Timestamp::now())
                .map(|_| ())
                .map_err(|invalid| invalid.to_string());
            assert!(refusal.as_ref().is_err_and(|message| message.starts_with(&field)), "{field}: {refusal:?}");
        }
    }

    #[test]
    fn a_youzan_push_takes_seconds_and_an_optional_topic() {
        let youzan = object_of(YouzanPushBody::schema());
        assert!(!youzan.required.contains(&"topic".to_owned()));
        assert!(object_of(PushBody::schema()).required.contains(&"topic".to_owned()));
        let ttr = youzan.properties.get("ttr").cloned().map(object_of).unwrap();
        assert!(ttr.minimum == Some(1.into()) && ttr.maximum == Some(86_400.into()));
        assert!(ttr.description.unwrap().contains("seconds"));
    }

    #[test]
    fn ids_and_topics_of_a_push_follow_the_name_rule() {
        let push = object_of(PushBody::schema());
        for field in ["topic", "id"] {
            let property = push.properties.get(field).cloned().map(object_of).unwrap();
            assert_eq!(property.pattern.as_deref(), Some(NAME_PATTERN), "{field}");
        }
        let accepted = PushRequest::from_json(
            &json!({"topic": "a.b_c:d-1", "body": ""}),
            TimeUnit::Millis,
            &Limits::default(),
            Timestamp::now(),
        );
        assert!(accepted.is_ok());
    }
}
