//! Reading a batch push, `{"jobs": [...]}`, without turning more of it into
//! values than a batch may hold.
//!
//! The body is first split into raw entries that borrow from it: past
//! [`MAX_BATCH_PUSH`] entries the rest are only counted, and each entry is
//! parsed alone, after its size is checked. A body of millions of tiny
//! entries, or one huge entry, so never becomes millions of values.

use std::fmt;

use delayq_common::{InvalidField, Limits, PushRequest, TimeUnit, Timestamp};
use delayq_queue::service::MAX_BATCH_PUSH;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::ApiError;
use crate::limits::job_wire_bytes;

/// The top level of a batch body: only `jobs` is read, other keys are skipped.
#[derive(Deserialize)]
struct BatchShape<'a> {
    #[serde(borrow)]
    jobs: Option<&'a RawValue>,
}

/// The first [`MAX_BATCH_PUSH`] entries of `jobs`, raw, and how many there were.
struct Entries<'a> {
    kept: Vec<&'a RawValue>,
    total: usize,
}

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Entries<'de>, D::Error> {
        deserializer.deserialize_seq(EntriesVisitor)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Entries<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an array of jobs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries<'de>, A::Error> {
        let mut kept = Vec::new();
        while kept.len() < MAX_BATCH_PUSH {
            match seq.next_element::<&'de RawValue>()? {
                Some(entry) => kept.push(entry),
                None => return Ok(Entries { total: kept.len(), kept }),
            }
        }
        let mut total = kept.len();
        while seq.next_element::<IgnoredAny>()?.is_some() {
            total = total.saturating_add(1);
        }
        Ok(Entries { kept, total })
    }
}

/// Parses a batch body into one push request (or the reason it is refused)
/// per entry, in order.
///
/// # Errors
/// A body that is not an object with a `jobs` array of at most
/// [`MAX_BATCH_PUSH`] entries; each entry is judged alone.
pub(crate) fn parse_batch(
    body: &[u8],
    limits: &Limits,
    now: Timestamp,
) -> Result<Vec<Result<PushRequest, InvalidField>>, ApiError> {
    let jobs = read_jobs(body)?;
    let trimmed = jobs.get().trim_start();
    if trimmed.starts_with("null") {
        return Err(ApiError::invalid("jobs is required"));
    }
    if !trimmed.starts_with('[') {
        return Err(ApiError::invalid("jobs must be an array"));
    }
    let entries: Entries<'_> = serde_json::from_str(jobs.get())
        .map_err(|cause| ApiError::invalid(format!("jobs is not valid JSON: {cause}")))?;
    if entries.total > MAX_BATCH_PUSH {
        return Err(ApiError::invalid(format!("jobs must have at most {MAX_BATCH_PUSH} entries")));
    }
    let max_entry_bytes = job_wire_bytes(limits.max_body_bytes);
    Ok(entries.kept.into_iter().map(|entry| parse_entry(entry, max_entry_bytes, limits, now)).collect())
}

/// Returns the raw `jobs` value of the body.
fn read_jobs(body: &[u8]) -> Result<&RawValue, ApiError> {
    let Some(first) = body.iter().find(|byte| !byte.is_ascii_whitespace()) else {
        return Err(ApiError::invalid("request body is required: a JSON object"));
    };
    if *first != b'{' {
        // Skimmed without building anything, only to word the refusal.
        return Err(match serde_json::from_slice::<IgnoredAny>(body) {
            Ok(_) => ApiError::invalid("request body must be a JSON object"),
            Err(cause) => ApiError::invalid(format!("request body is not valid JSON: {cause}")),
        });
    }
    match serde_json::from_slice::<BatchShape<'_>>(body) {
        Ok(BatchShape { jobs: Some(jobs) }) => Ok(jobs),
        Ok(BatchShape { jobs: None }) => Err(ApiError::invalid("jobs is required")),
        Err(cause) if cause.is_data() => Err(ApiError::invalid(format!("request body is not valid: {cause}"))),
        Err(cause) => Err(ApiError::invalid(format!("request body is not valid JSON: {cause}"))),
    }
}

fn parse_entry(
    entry: &RawValue,
    max_entry_bytes: usize,
    limits: &Limits,
    now: Timestamp,
) -> Result<PushRequest, InvalidField> {
    if entry.get().len() > max_entry_bytes {
        return Err(InvalidField::too_large("job", format!("must be at most {max_entry_bytes} bytes of JSON")));
    }
    let value: Value = serde_json::from_str(entry.get())
        .map_err(|cause| InvalidField::new("job", format!("is not valid JSON: {cause}")))?;
    PushRequest::from_json(&value, TimeUnit::Millis, limits, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    fn parse(body: &str) -> Result<Vec<Result<PushRequest, InvalidField>>, String> {
        parse_batch(body.as_bytes(), &Limits::default(), NOW).map_err(|error| error.message().to_owned())
    }

    fn refusal(body: &str) -> String {
        match parse(body) {
            Ok(_) => panic!("{body} must be refused"),
            Err(message) => message,
        }
    }

    #[test]
    fn each_entry_is_judged_alone() {
        let Ok(items) = parse(r#"{"jobs": [{"topic": "t", "body": "b"}, {"topic": "t"}, 5], "other": [1]}"#) else {
            panic!("a valid batch")
        };
        assert_eq!(items.len(), 3);
        assert!(items.first().is_some_and(Result::is_ok));
        let errors: Vec<String> =
            items.iter().skip(1).filter_map(|item| item.as_ref().err()).map(ToString::to_string).collect();
        assert_eq!(errors, ["body is required", "job must be a JSON object"]);
    }

    #[test]
    fn the_shape_is_checked_with_the_field_named() {
        assert_eq!(refusal(""), "request body is required: a JSON object");
        assert_eq!(refusal("[1]"), "request body must be a JSON object");
        assert!(refusal("nope").starts_with("request body is not valid JSON"));
        assert!(refusal(r#"{"jobs": [}"#).starts_with("request body is not valid JSON"));
        assert_eq!(refusal("{}"), "jobs is required");
        assert_eq!(refusal(r#"{"jobs": null}"#), "jobs is required");
        assert_eq!(refusal(r#"{"jobs": {"topic": "t"}}"#), "jobs must be an array");
        assert!(refusal(r#"{"jobs": [], "jobs": []}"#).contains("duplicate field `jobs`"));
    }

    #[test]
    fn entries_past_the_limit_are_counted_not_kept() {
        let body = format!(r#"{{"jobs": [{}]}}"#, vec!["{}"; MAX_BATCH_PUSH + 1].join(","));
        assert_eq!(refusal(&body), format!("jobs must have at most {MAX_BATCH_PUSH} entries"));
        let full = format!(r#"{{"jobs": [{}]}}"#, vec!["{}"; MAX_BATCH_PUSH].join(","));
        assert_eq!(parse(&full).map(|items| items.len()), Ok(MAX_BATCH_PUSH));
    }

    #[test]
    fn an_oversized_entry_is_refused_alone_without_being_parsed() {
        let limits = Limits { max_body_bytes: 10, ..Limits::default() };
        let big = format!(r#"{{"topic": "t", "body": "b", "pad": [{}]}}"#, vec!["0"; 10_000].join(","));
        let body = format!(r#"{{"jobs": [{big}, {{"topic": "t", "body": "b"}}]}}"#);
        let Ok(items) = parse_batch(body.as_bytes(), &limits, NOW) else { panic!("a valid batch") };
        let first = items.first().and_then(|item| item.as_ref().err());
        assert!(first.is_some_and(|error| error.too_large && error.field == "job"), "{first:?}");
        assert!(items.get(1).is_some_and(Result::is_ok));
    }
}
