//! Reading script replies: Lua tables arrive as arrays, strings as bulk
//! strings, numbers as integers and `false` as nil.

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use redis::Value;

use super::codec::{self, CodecError};
use super::keys;

/// The outcome of a script that acts on one job.
pub(super) enum Status {
    /// Done; the rest of the reply follows.
    Done(std::vec::IntoIter<Value>),
    /// No such job.
    NotFound,
    /// The job is in this state, which the operation does not allow.
    WrongState(JobState),
    /// The job is at this attempt, not the one the caller named.
    StaleAttempt(u32),
}

/// Splits a `{ 'ok', ... } | { 'nf' } | { 'ws', state } | { 'wa', attempt }` reply.
pub(super) fn status(reply: Value) -> Result<Status, CodecError> {
    let mut items = array(reply)?.into_iter();
    let tag = bytes(next(&mut items)?)?;
    match tag.as_slice() {
        b"ok" => Ok(Status::Done(items)),
        b"nf" => Ok(Status::NotFound),
        b"ws" => Ok(Status::WrongState(codec::state_of_code(int(&next(&mut items)?)?)?)),
        b"wa" => Ok(Status::StaleAttempt(u32::try_from(int(&next(&mut items)?)?).map_err(|_| CodecError("attempt"))?)),
        _ => Err(CodecError("reply")),
    }
}

/// Returns the next item of a reply.
pub(super) fn next(items: &mut impl Iterator<Item = Value>) -> Result<Value, CodecError> {
    items.next().ok_or(CodecError("reply"))
}

/// Reads an array (nil reads as empty: Lua turns an empty table into one).
pub(super) fn array(value: Value) -> Result<Vec<Value>, CodecError> {
    match value {
        Value::Array(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        _ => Err(CodecError("reply")),
    }
}

/// Reads a string.
pub(super) fn bytes(value: Value) -> Result<Vec<u8>, CodecError> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.into_bytes()),
        _ => Err(CodecError("reply")),
    }
}

/// Reads an integer (or a string holding one).
pub(super) fn int(value: &Value) -> Result<i64, CodecError> {
    match value {
        Value::Int(number) => Ok(*number),
        Value::BulkString(bytes) => {
            std::str::from_utf8(bytes).ok().and_then(|text| text.parse().ok()).ok_or(CodecError("number"))
        }
        _ => Err(CodecError("number")),
    }
}

/// Reads an optional instant in epoch ms (nil: none).
pub(super) fn instant(value: &Value) -> Result<Option<u64>, CodecError> {
    match value {
        Value::Nil => Ok(None),
        other => u64::try_from(int(other)?).map(Some).map_err(|_| CodecError("number")),
    }
}

/// Reads a topic name.
pub(super) fn topic(value: Value) -> Result<Topic, CodecError> {
    let name = String::from_utf8(bytes(value)?).map_err(|_| CodecError("topic"))?;
    Topic::parse_stored(name).map_err(|_| CodecError("topic"))
}

/// Reads the list of topics a script made ready.
pub(super) fn topics(value: Value) -> Result<Vec<String>, CodecError> {
    array(value)?.into_iter().map(|item| String::from_utf8(bytes(item)?).map_err(|_| CodecError("topic"))).collect()
}

/// Reads `topic, record` of the job `id`.
pub(super) fn job(id: JobId, items: &mut impl Iterator<Item = Value>) -> Result<Job, CodecError> {
    let topic = topic(next(items)?)?;
    codec::decode_record(id, topic, &bytes(next(items)?)?)
}

/// Reads `id, record` pairs of `topic`.
pub(super) fn jobs_of_topic(value: Value, topic: &Topic) -> Result<Vec<Job>, CodecError> {
    let mut items = array(value)?.into_iter();
    let mut jobs = Vec::with_capacity(items.len() / 2);
    while let Some(field) = items.next() {
        let id = keys::decode_id(&bytes(field)?)?;
        jobs.push(codec::decode_record(id, topic.clone(), &bytes(next(&mut items)?)?)?);
    }
    Ok(jobs)
}

/// Reads the `id, topic, record, state` groups of promote.lua; ended jobs get
/// their final state and `updated_at = now`.
pub(super) fn changed_jobs(value: Value, now: Timestamp) -> Result<Vec<Job>, CodecError> {
    let mut items = array(value)?.into_iter();
    let mut jobs = Vec::with_capacity(items.len() / 4);
    while let Some(field) = items.next() {
        let id = keys::decode_id(&bytes(field)?)?;
        let mut job = job(id, &mut items)?;
        let state = codec::state_of_code(int(&next(&mut items)?)?)?;
        if state.is_terminal() {
            job.state = state;
            job.updated_at = now;
        }
        jobs.push(job);
    }
    Ok(jobs)
}
