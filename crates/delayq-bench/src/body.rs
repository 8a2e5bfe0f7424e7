//! Job bodies (`{"i":<i>,"due":<due_ms>,"pad":"xxx…"}`, docs/benchmarks.md) and the
//! pre-serialized push requests that carry them.

use bytes::Bytes;

use crate::error::BenchError;

/// The part of a body before `i`.
const INDEX_PREFIX: &str = "{\"i\":";
/// The part of a body between `i` and `due`.
const DUE_PREFIX: &str = ",\"due\":";
/// The part of a body between `due` and the pad.
const PAD_PREFIX: &str = ",\"pad\":\"";
/// The end of a body.
const BODY_SUFFIX: &str = "\"}";

/// Returns the compact JSON body of job `index`, padded with `x` to exactly `body_bytes`.
///
/// # Errors
/// Returns [`BenchError::Invalid`] when `body_bytes` is too small for the fields.
pub(crate) fn job_body(index: u64, due_ms: u64, body_bytes: usize) -> Result<String, BenchError> {
    let mut body = String::with_capacity(body_bytes);
    body.push_str(INDEX_PREFIX);
    body.push_str(&index.to_string());
    body.push_str(DUE_PREFIX);
    body.push_str(&due_ms.to_string());
    body.push_str(PAD_PREFIX);
    let unpadded_len = body.len() + BODY_SUFFIX.len();
    let Some(pad_len) = body_bytes.checked_sub(unpadded_len) else {
        return Err(BenchError::Invalid(format!(
            "body-bytes {body_bytes} is too small: job {index} needs at least {unpadded_len}"
        )));
    };
    body.push_str(&"x".repeat(pad_len));
    body.push_str(BODY_SUFFIX);
    debug_assert_eq!(body.len(), body_bytes);
    Ok(body)
}

/// When a pushed job becomes due, as sent to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DueTime {
    /// `delay`: milliseconds after the server receives the push.
    DelayMs(u64),
    /// `runAt`: an absolute epoch-millisecond instant.
    RunAtMs(u64),
}

/// Returns the JSON object of one push: `{"topic":…,"delay"|"runAt":…,"body":…}`.
pub(crate) fn push_item(topic: &str, due: DueTime, body: &str) -> String {
    // The topic and the body are plain ASCII without quotes that need more than
    // serde_json's string escaping, which is what keeps this exact.
    let topic_json = serde_json::Value::from(topic).to_string();
    let body_json = serde_json::Value::from(body).to_string();
    let (due_field, due_value) = match due {
        DueTime::DelayMs(delay_ms) => ("delay", delay_ms),
        DueTime::RunAtMs(run_at_ms) => ("runAt", run_at_ms),
    };
    format!("{{\"topic\":{topic_json},\"{due_field}\":{due_value},\"body\":{body_json}}}")
}

/// Returns the `/push/batch` payload `{"jobs":[…]}` of already serialized items.
pub(crate) fn batch_payload<'item>(items: impl IntoIterator<Item = &'item str>) -> Bytes {
    let mut payload = String::from("{\"jobs\":[");
    for (position, item) in items.into_iter().enumerate() {
        if position > 0 {
            payload.push(',');
        }
        payload.push_str(item);
    }
    payload.push_str("]}");
    Bytes::from(payload)
}

/// Reads `i` and `due` back from a body made by [`job_body`]; `None` for any other body.
pub(crate) fn parse_body_fields(body: &str) -> Option<(u64, u64)> {
    let after_index_key = body.strip_prefix(INDEX_PREFIX)?;
    let (index, after_index) = split_number(after_index_key)?;
    let after_due_key = after_index.strip_prefix(DUE_PREFIX)?;
    let (due_ms, _) = split_number(after_due_key)?;
    Some((index, due_ms))
}

/// Splits a leading decimal number off `text`.
fn split_number(text: &str) -> Option<(u64, &str)> {
    let digits_len = text.bytes().take_while(u8::is_ascii_digit).count();
    let (digits, rest) = text.split_at_checked(digits_len)?;
    Some((digits.parse().ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_exactly_body_bytes_long() {
        let Ok(body) = job_body(7, 0, 100) else { panic!("100 bytes fit") };
        assert_eq!(body.len(), 100);
        assert!(body.starts_with("{\"i\":7,\"due\":0,\"pad\":\"xxx"));
        assert!(body.ends_with("xx\"}"));
        assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok());
        let Ok(late) = job_body(19_999, 1_700_000_015_000, 100) else { panic!("100 bytes fit") };
        assert_eq!(late.len(), 100);
    }

    #[test]
    fn bodies_without_room_for_the_fields_are_refused() {
        assert!(job_body(1, 0, 10).is_err());
        let Ok(exact) = job_body(1, 0, 24) else { panic!("24 bytes fit an empty pad") };
        assert_eq!(exact, "{\"i\":1,\"due\":0,\"pad\":\"\"}");
    }

    #[test]
    fn body_fields_round_trip() {
        let Ok(body) = job_body(123, 1_700_000_000_456, 100) else { panic!("fits") };
        assert_eq!(parse_body_fields(&body), Some((123, 1_700_000_000_456)));
        assert_eq!(parse_body_fields("{\"x\":1}"), None);
        assert_eq!(parse_body_fields("{\"i\":,\"due\":1}"), None);
    }

    #[test]
    fn push_items_escape_the_body() {
        let item = push_item("bench-1", DueTime::DelayMs(250), "{\"i\":0}");
        assert_eq!(item, r#"{"topic":"bench-1","delay":250,"body":"{\"i\":0}"}"#);
        let at = push_item("t", DueTime::RunAtMs(99), "b");
        assert_eq!(at, r#"{"topic":"t","runAt":99,"body":"b"}"#);
    }

    #[test]
    fn batch_payloads_join_items() {
        let payload = batch_payload(["{\"a\":1}", "{\"b\":2}"]);
        assert_eq!(&payload[..], b"{\"jobs\":[{\"a\":1},{\"b\":2}]}");
        assert_eq!(&batch_payload([])[..], b"{\"jobs\":[]}");
    }
}
