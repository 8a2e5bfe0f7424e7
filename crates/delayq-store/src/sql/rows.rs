//! Mapping between `job` / `job_log` rows and the store's types, for both
//! dialects: the column list, decoding, and the values columns hold.

use std::time::Duration;

use delayq_common::{Group, Job, JobId, JobState, Timestamp, Topic};
use sqlx::error::BoxDynError;
use sqlx::{Database, Decode, Type};

use crate::store::{LogEntry, StateCount, StoreError};

/// Every stored column of `job`, in the order of [`JobRow`] and
/// [`bind_job`](super::binds::bind_job).
macro_rules! job_columns {
    () => {
        "id, bizkey, topic, subtopic, delay, create_time, body, status, ttl, update_time, \
         run_at, ttr, priority, attempt, max_retries, retry_backoff, result, job_groups"
    };
}
pub(crate) use job_columns;

/// How many values [`bind_job`](super::binds::bind_job) binds: one per column of [`job_columns!`].
pub(crate) const JOB_COLUMN_COUNT: usize = 18;

/// What separates the names in `job_groups` (no name holds it).
const GROUP_SEPARATOR: char = ',';

/// A text column, as either database returns it.
///
/// MySQL flags the columns of the binary collation `utf8mb4_bin` BINARY, and
/// sqlx then refuses to decode them as `String`; this type takes the bytes of
/// a text or binary column and checks that they are UTF-8. SQLite hands the
/// bytes of its `TEXT` columns over the same way.
#[derive(Debug)]
pub(crate) struct Text(pub(crate) String);

impl<DB: Database> Type<DB> for Text
where
    str: Type<DB>,
    [u8]: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <str as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <str as Type<DB>>::compatible(ty) || <[u8] as Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: Database> Decode<'r, DB> for Text
where
    &'r [u8]: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Text, BoxDynError> {
        let bytes = <&[u8] as Decode<'r, DB>>::decode(value)?;
        Ok(Text(std::str::from_utf8(bytes)?.to_owned()))
    }
}

fn text(column: Option<Text>) -> Option<String> {
    column.map(|Text(text)| text)
}

/// A `job` row as SQL types.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct JobRow {
    id: Text,
    bizkey: Option<Text>,
    topic: Text,
    subtopic: Option<Text>,
    delay: i64,
    create_time: i64,
    body: Text,
    status: Text,
    ttl: i64,
    update_time: i64,
    run_at: i64,
    ttr: i64,
    priority: i64,
    attempt: i64,
    max_retries: i64,
    retry_backoff: Text,
    result: Option<Text>,
    job_groups: Option<Text>,
}

impl JobRow {
    /// Checks and converts the row.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming the first column that does not fit.
    pub(crate) fn into_job(self) -> Result<Job, StoreError> {
        let id = job_id(self.id.0)?;
        Ok(Job {
            topic: topic(self.topic.0)?,
            subtopic: text(self.subtopic),
            body: self.body.0,
            biz_key: text(self.bizkey),
            create_time: timestamp("create_time", self.create_time)?,
            delay: duration("delay", self.delay)?,
            run_at: timestamp("run_at", self.run_at)?,
            ttr: duration("ttr", self.ttr)?,
            priority: number("priority", self.priority)?,
            max_retries: number("max_retries", self.max_retries)?,
            retry_backoff: decode_backoff(&self.retry_backoff.0)?,
            ttl: duration("ttl", self.ttl)?,
            attempt: number("attempt", self.attempt)?,
            state: state(&self.status.0)?,
            result: text(self.result),
            updated_at: timestamp("update_time", self.update_time)?,
            id,
            groups: decode_groups(text(self.job_groups).as_deref())?,
        })
    }
}

/// Converts rows, failing on the first corrupt one.
pub(crate) fn into_jobs(rows: Vec<JobRow>) -> Result<Vec<Job>, StoreError> {
    rows.into_iter().map(JobRow::into_job).collect()
}

/// A `job_log` row as SQL types.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct LogEntryRow {
    status: Text,
    attempt: i64,
    update_time: i64,
    node: Text,
}

impl LogEntryRow {
    /// Checks and converts the row.
    pub(crate) fn into_entry(self) -> Result<LogEntry, StoreError> {
        Ok(LogEntry {
            state: state(&self.status.0)?,
            attempt: number("job_log.attempt", self.attempt)?,
            at: timestamp("job_log.update_time", self.update_time)?,
            node: self.node.0,
        })
    }
}

/// Checks and converts a row of the counts query: topic, status, count.
pub(crate) fn state_count((Text(topic), Text(status), count): (Text, Text, i64)) -> Result<StateCount, StoreError> {
    Ok(StateCount { topic: self::topic(topic)?, state: state(&status)?, count: number("count", count)? })
}

/// Checks and converts the id and attempt of a job a statement changed.
pub(crate) fn id_and_attempt(id: String, attempt: i64) -> Result<(JobId, u32), StoreError> {
    Ok((job_id(id)?, number("attempt", attempt)?))
}

/// The refusal of `job` because `holder`, another live job, holds its
/// business key (empty when it could not be read).
pub(crate) fn biz_key_taken(job: &Job, holder: Option<Text>) -> StoreError {
    let biz_key = job.biz_key.clone().unwrap_or_default();
    StoreError::BizKeyTaken { topic: job.topic.clone(), biz_key, id: text(holder).unwrap_or_default() }
}

/// Parses an `id` column: a client's id or a group's delivery of one.
fn job_id(id: String) -> Result<JobId, StoreError> {
    JobId::parse_stored(id).map_err(|error| corrupt("id", error))
}

/// Parses a `topic` column: a client's topic or a group's delivery topic.
fn topic(topic: String) -> Result<Topic, StoreError> {
    Topic::parse_stored(topic).map_err(|error| corrupt("topic", error))
}

/// Returns an instant as an SQL integer (saturating; no real instant overflows).
pub(crate) fn epoch_ms(at: Timestamp) -> i64 {
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

/// Returns a duration as SQL integer milliseconds (saturating).
pub(crate) fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Returns a count or limit as an SQL integer (saturating).
pub(crate) fn sql_count(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Encodes the backoff as a JSON array of milliseconds.
pub(crate) fn encode_backoff(backoff: &[Duration]) -> String {
    let millis: Vec<String> = backoff.iter().map(|delay| duration_ms(*delay).to_string()).collect();
    format!("[{}]", millis.join(","))
}

/// Encodes the groups a job is restricted to as `job_groups` holds them:
/// their names joined by [`GROUP_SEPARATOR`], or NULL for none.
pub(crate) fn encode_groups(groups: &[Group]) -> Option<String> {
    if groups.is_empty() {
        return None;
    }
    let names: Vec<&str> = groups.iter().map(Group::as_str).collect();
    Some(names.join(&GROUP_SEPARATOR.to_string()))
}

fn decode_groups(column: Option<&str>) -> Result<Vec<Group>, StoreError> {
    let Some(names) = column else { return Ok(Vec::new()) };
    names.split(GROUP_SEPARATOR).map(|name| Group::parse(name).map_err(|error| corrupt("job_groups", error))).collect()
}

fn decode_backoff(text: &str) -> Result<Vec<Duration>, StoreError> {
    let millis: Vec<u64> = serde_json::from_str(text).map_err(|error| corrupt("retry_backoff", error))?;
    Ok(millis.into_iter().map(Duration::from_millis).collect())
}

/// Parses a `status` column.
pub(crate) fn state(name: &str) -> Result<JobState, StoreError> {
    name.parse().map_err(|error| corrupt("status", error))
}

/// Converts an SQL integer, failing on values the domain type cannot hold.
fn number<T: TryFrom<i64>>(column: &str, value: i64) -> Result<T, StoreError> {
    T::try_from(value).map_err(|_| StoreError::Corrupt(format!("{column} {value} is out of range")))
}

fn timestamp(column: &str, value: i64) -> Result<Timestamp, StoreError> {
    number(column, value).map(Timestamp::from_millis)
}

fn duration(column: &str, value: i64) -> Result<Duration, StoreError> {
    number(column, value).map(Duration::from_millis)
}

/// Names the column of a value that does not fit its domain type.
fn corrupt(column: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{column}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_column_list_matches_the_bound_count() {
        assert_eq!(job_columns!().split(',').count(), JOB_COLUMN_COUNT);
    }

    #[test]
    fn backoff_round_trips_as_json_milliseconds() {
        let backoff = vec![Duration::from_millis(100), Duration::from_secs(2)];
        assert_eq!(encode_backoff(&backoff), "[100,2000]");
        assert_eq!(decode_backoff("[100,2000]").ok(), Some(backoff));
        assert_eq!(encode_backoff(&[]), "[]");
        assert!(matches!(decode_backoff("[-1]"), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn groups_round_trip_as_comma_separated_names_or_null() {
        let groups: Vec<Group> = ["a", "b.c"].into_iter().map(|name| Group::parse(name).unwrap()).collect();
        assert_eq!(encode_groups(&groups).as_deref(), Some("a,b.c"));
        assert_eq!(decode_groups(Some("a,b.c")).ok(), Some(groups));
        assert_eq!(encode_groups(&[]), None);
        assert_eq!(decode_groups(None).ok(), Some(Vec::new()));
        for corrupt in ["", "a,,b", "a,", "a/b", "a b"] {
            assert!(matches!(decode_groups(Some(corrupt)), Err(StoreError::Corrupt(_))), "{corrupt:?}");
        }
        assert!(Group::parse(format!("a{GROUP_SEPARATOR}b")).is_err(), "no name holds the separator");
    }

    #[test]
    fn delivery_ids_and_topics_read_back_and_other_forms_are_corrupt() {
        assert_eq!(job_id("order:1/billing".into()).ok().map(String::from).as_deref(), Some("order:1/billing"));
        assert_eq!(topic("orders/billing".into()).ok().map(String::from).as_deref(), Some("orders/billing"));
        for corrupt in ["a/b/c", "a/", "/b", ""] {
            assert!(matches!(job_id(corrupt.into()), Err(StoreError::Corrupt(_))), "{corrupt:?}");
            assert!(matches!(topic(corrupt.into()), Err(StoreError::Corrupt(_))), "{corrupt:?}");
        }
    }

    #[test]
    fn out_of_range_numbers_are_corrupt() {
        assert!(matches!(number::<u8>("priority", 300), Err(StoreError::Corrupt(_))));
        assert!(matches!(timestamp("run_at", -1), Err(StoreError::Corrupt(_))));
        assert!(matches!(id_and_attempt("job-1".into(), -1), Err(StoreError::Corrupt(_))));
        assert_eq!(epoch_ms(Timestamp::from_millis(u64::MAX)), i64::MAX);
    }
}
