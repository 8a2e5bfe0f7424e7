//! The compact job record kept in the pool hash, the Rust half of the format
//! documented in `lua/lib.lua`.
//!
//! The record is sized for memory: with a 100-byte body and default options it
//! is about 120 bytes, so Redis stores it in a 128-byte allocation. Numbers are
//! varints, instants are deltas from `create_time`, the topic is a per-shard
//! code, and optional fields cost nothing when absent. Lua reads and rewrites
//! the header (state, priority, topic code, attempt, instants, ttr, ttl); the
//! tail (body, subtopic, biz key, backoff, result) is opaque to it.

use std::time::Duration;

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};

/// A record (or id) that Redis holds could not be read.
#[derive(Debug, thiserror::Error)]
#[error("corrupt {0} in a redis job record")]
pub(super) struct CodecError(pub(super) &'static str);

/// The state codes scripts use (records hold only the first three).
const STATE_DELAY: u8 = 0;
const STATE_READY: u8 = 1;
const STATE_RESERVED: u8 = 2;
const STATE_DEAD: u8 = 5;
const STATE_EXPIRED: u8 = 6;

/// Ready queues order by `priority * 2^43 + run_at`, in ms (exact in a double).
const PRIORITY_WEIGHT: u64 = 1 << 43;
/// The largest integer Lua's doubles hold exactly; numbers are clamped to it.
pub(super) const LUA_MAX: u64 = (1 << 53) - 1;

const FLAG_SUBTOPIC: u8 = 1 << 5;
const FLAG_BIZ_KEY: u8 = 1 << 6;
const FLAG_EXTRAS: u8 = 1 << 7;
const EXTRA_BACKOFF: u8 = 1;
const EXTRA_RESULT: u8 = 2;

/// Returns the script code of a state.
pub(super) fn state_code(state: JobState) -> u8 {
    match state {
        JobState::Delay => STATE_DELAY,
        JobState::Ready => STATE_READY,
        JobState::Reserved => STATE_RESERVED,
        JobState::Dead => STATE_DEAD,
        // Scripts never see the others; they are not held.
        _ => STATE_EXPIRED,
    }
}

/// Returns the state of a script code.
pub(super) fn state_of_code(code: i64) -> Result<JobState, CodecError> {
    match u8::try_from(code).map_err(|_| CodecError("state"))? {
        STATE_DELAY => Ok(JobState::Delay),
        STATE_READY => Ok(JobState::Ready),
        STATE_RESERVED => Ok(JobState::Reserved),
        STATE_DEAD => Ok(JobState::Dead),
        STATE_EXPIRED => Ok(JobState::Expired),
        _ => Err(CodecError("state")),
    }
}

/// Returns the score of a ready job in its topic's ready queue.
pub(super) fn ready_score(job: &Job) -> u64 {
    u64::from(job.priority.min(7)) * PRIORITY_WEIGHT + job.run_at.as_millis().min(PRIORITY_WEIGHT - 1)
}

/// Returns the due instant of a delayed job as scripts score it.
pub(super) fn due_millis(job: &Job) -> u64 {
    clamp(job.run_at.as_millis())
}

/// Returns the ttl expiry instant of a job that is ready, or 0 when it never expires.
pub(super) fn expiry_millis(job: &Job) -> u64 {
    job.expires_at().map_or(0, |at| at.as_millis().min(LUA_MAX))
}

/// Appends `job` in `state` to `out` as scripts expect it from Rust: with
/// the shard's `topic_code` when the caller knows it, else without one, for
/// the script to splice in after the first byte.
pub(super) fn encode_record(job: &Job, state: JobState, topic_code: Option<u64>, out: &mut Vec<u8>) {
    debug_assert!(job.priority <= 7 && state.is_live());
    let mut flags = 0;
    if job.subtopic.is_some() {
        flags |= FLAG_SUBTOPIC;
    }
    if job.biz_key.is_some() {
        flags |= FLAG_BIZ_KEY;
    }
    let mut extras = 0;
    if !job.retry_backoff.is_empty() {
        extras |= EXTRA_BACKOFF;
    }
    if job.result.is_some() {
        extras |= EXTRA_RESULT;
    }
    if extras != 0 {
        flags |= FLAG_EXTRAS;
    }
    out.push(flags | (state_code(state) << 3) | job.priority.min(7));
    if let Some(code) = topic_code {
        put_varint(out, code);
    }
    let create = clamp(job.create_time.as_millis());
    let run_at = clamp(job.run_at.as_millis());
    let since_create = run_at as i64 - create as i64;
    put_varint(out, u64::from(job.attempt));
    put_varint(out, u64::from(job.max_retries));
    put_varint(out, create);
    put_varint(out, zigzag(since_create));
    put_varint(out, zigzag(clamp(job.updated_at.as_millis()) as i64 - create as i64));
    put_varint(out, millis(job.ttr));
    put_varint(out, millis(job.ttl));
    put_varint(out, zigzag(millis(job.delay) as i64 - since_create));
    put_bytes(out, job.body.as_bytes());
    if let Some(subtopic) = &job.subtopic {
        put_bytes(out, subtopic.as_bytes());
    }
    if let Some(biz_key) = &job.biz_key {
        put_bytes(out, biz_key.as_bytes());
    }
    if extras != 0 {
        out.push(extras);
    }
    if !job.retry_backoff.is_empty() {
        put_varint(out, job.retry_backoff.len() as u64);
        for backoff in &job.retry_backoff {
            put_varint(out, millis(*backoff));
        }
    }
    if let Some(result) = &job.result {
        put_bytes(out, result.as_bytes());
    }
}

/// Decodes a stored record (with its topic code) of the job `id` in `topic`.
pub(super) fn decode_record(id: JobId, topic: Topic, record: &[u8]) -> Result<Job, CodecError> {
    let mut input = record;
    let first = take_byte(&mut input)?;
    let state = state_of_code(i64::from((first >> 3) & 0b11))?;
    let _topic_code = read_varint(&mut input)?;
    let attempt = read_u32(&mut input)?;
    let max_retries = read_u32(&mut input)?;
    let create = read_varint(&mut input)?;
    let run_at = offset(create, unzigzag(read_varint(&mut input)?));
    let updated_at = offset(create, unzigzag(read_varint(&mut input)?));
    let ttr = Duration::from_millis(read_varint(&mut input)?);
    let ttl = Duration::from_millis(read_varint(&mut input)?);
    let since_create = i128::from(run_at) - i128::from(create);
    let delay_ms =
        (since_create + i128::from(unzigzag(read_varint(&mut input)?))).clamp(0, i128::from(u64::MAX)) as u64;
    let body = read_string(&mut input)?;
    let subtopic = (first & FLAG_SUBTOPIC != 0).then(|| read_string(&mut input)).transpose()?;
    let biz_key = (first & FLAG_BIZ_KEY != 0).then(|| read_string(&mut input)).transpose()?;
    let extras = if first & FLAG_EXTRAS != 0 { take_byte(&mut input)? } else { 0 };
    let mut retry_backoff = Vec::new();
    if extras & EXTRA_BACKOFF != 0 {
        let entries = read_varint(&mut input)?;
        for _ in 0..entries.min(record.len() as u64) {
            retry_backoff.push(Duration::from_millis(read_varint(&mut input)?));
        }
    }
    let result = (extras & EXTRA_RESULT != 0).then(|| read_string(&mut input)).transpose()?;
    Ok(Job {
        id,
        topic,
        subtopic,
        body,
        biz_key,
        create_time: Timestamp::from_millis(create),
        delay: Duration::from_millis(delay_ms),
        run_at: Timestamp::from_millis(run_at),
        ttr,
        priority: first & 0b111,
        max_retries,
        retry_backoff,
        ttl,
        attempt,
        state,
        result,
        updated_at: Timestamp::from_millis(updated_at),
        groups: Vec::new(),
    })
}

fn clamp(value: u64) -> u64 {
    value.min(LUA_MAX)
}

fn millis(duration: Duration) -> u64 {
    clamp(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

fn offset(base: u64, delta: i64) -> u64 {
    base.saturating_add_signed(delta)
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn take_byte(input: &mut &[u8]) -> Result<u8, CodecError> {
    let (&first, rest) = input.split_first().ok_or(CodecError("record"))?;
    *input = rest;
    Ok(first)
}

/// Reads a varint the way Lua writes it (at most 2^53, so at most 8 bytes).
fn read_varint(input: &mut &[u8]) -> Result<u64, CodecError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = take_byte(input)?;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(value);
        }
    }
    Err(CodecError("number"))
}

fn read_u32(input: &mut &[u8]) -> Result<u32, CodecError> {
    u32::try_from(read_varint(input)?).map_err(|_| CodecError("number"))
}

fn read_string(input: &mut &[u8]) -> Result<String, CodecError> {
    let len = usize::try_from(read_varint(input)?).map_err(|_| CodecError("length"))?;
    if len > input.len() {
        return Err(CodecError("length"));
    }
    let (bytes, rest) = input.split_at(len);
    *input = rest;
    String::from_utf8(bytes.to_vec()).map_err(|_| CodecError("text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `with_topic_code` in lib.lua does.
    fn stored(job: &Job, state: JobState, topic_code: u64) -> Vec<u8> {
        let mut built = Vec::new();
        encode_record(job, state, None, &mut built);
        let mut record = vec![built[0]];
        put_varint(&mut record, topic_code);
        record.extend_from_slice(&built[1..]);
        record
    }

    /// A plain job due in an hour, at a fixed instant so that records are
    /// the same from run to run.
    fn sample(body_len: usize) -> Job {
        let now = Timestamp::from_millis(1_790_000_000_000);
        let job = delayq_testkit::job_created_at(
            "1234567890123456789",
            &delayq_testkit::topic("bench"),
            now,
            now.plus(Duration::from_secs(3600)),
        );
        Job { body: "x".repeat(body_len), ..job }
    }

    #[test]
    fn a_default_job_with_a_100_byte_body_fits_a_128_byte_allocation() {
        // Redis stores the value as an sds string: 3 header bytes + content + NUL.
        let record = stored(&sample(100), JobState::Delay, 1);
        assert!(record.len() + 4 <= 128, "{} bytes", record.len());
    }

    #[test]
    fn records_round_trip() {
        let plain = sample(100);
        let mut full = sample(10);
        full.subtopic = Some("sub".into());
        full.biz_key = Some("order-1".into());
        full.retry_backoff = vec![Duration::from_millis(100), Duration::from_secs(5)];
        full.result = Some("done".into());
        full.priority = 4;
        full.ttl = Duration::from_secs(60);
        full.attempt = 3;
        full.state = JobState::Reserved;
        full.updated_at = full.run_at.plus(Duration::from_millis(5));
        let mut past = sample(1);
        past.run_at = Timestamp::from_millis(past.create_time.as_millis() - 10_000);
        past.delay = Duration::ZERO;
        past.state = JobState::Ready;
        for job in [plain, full, past] {
            let record = stored(&job, job.state, 300);
            let back = decode_record(job.id.clone(), job.topic.clone(), &record).expect("decodes");
            assert_eq!(back, job);
        }
    }

    #[test]
    fn a_record_built_with_its_topic_code_is_the_spliced_one() {
        for code in [1, 127, 128, 300, 1 << 20] {
            let job = sample(100);
            let mut built = Vec::new();
            encode_record(&job, JobState::Delay, Some(code), &mut built);
            assert_eq!(built, stored(&job, JobState::Delay, code), "code {code}");
        }
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        let record = stored(&sample(20), JobState::Delay, 1);
        for len in 0..record.len() {
            let id = JobId::parse("1").expect("id");
            let topic = Topic::parse("t").expect("topic");
            assert!(decode_record(id, topic, &record[..len]).is_err(), "{len}");
        }
    }

    #[test]
    fn zigzag_matches_the_lua_formula() {
        for value in [0i64, 1, -1, 2, -2, 3_600_000, -3_600_000] {
            let lua = if value >= 0 { value * 2 } else { -value * 2 - 1 };
            assert_eq!(zigzag(value), lua as u64);
            assert_eq!(unzigzag(zigzag(value)), value);
        }
    }

    #[test]
    fn ready_scores_order_by_priority_then_due_time() {
        let mut urgent_late = sample(1);
        urgent_late.priority = 0;
        urgent_late.run_at = urgent_late.run_at.plus(Duration::from_secs(86_400 * 365));
        let normal_early = sample(1);
        assert!(ready_score(&urgent_late) < ready_score(&normal_early));
        assert!(ready_score(&sample(1)) < LUA_MAX);
    }
}
