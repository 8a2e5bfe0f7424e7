//! Mapping between MySQL `job` rows and [`Job`]s: column lists, bound values and decoding.

use std::time::Duration;

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use sqlx::error::BoxDynError;
use sqlx::mysql::{MySqlArguments, MySqlTypeInfo, MySqlValueRef};
use sqlx::query::Query;
use sqlx::MySql;

use crate::store::{LogEntry, StoreError};

/// Every stored column of `job`, in the order of [`JobRow`] and [`bind_job`].
macro_rules! job_columns {
    () => {
        "id, bizkey, topic, subtopic, delay, create_time, body, status, ttl, update_time, \
         run_at, ttr, priority, attempt, max_retries, retry_backoff, result"
    };
}
pub(super) use job_columns;

/// Every column of `job` but `id` as `column = ?`, in the order of [`bind_job_assignments`].
macro_rules! job_assignments {
    () => {
        "bizkey = ?, topic = ?, subtopic = ?, delay = ?, create_time = ?, body = ?, status = ?, \
         ttl = ?, update_time = ?, run_at = ?, ttr = ?, priority = ?, attempt = ?, max_retries = ?, \
         retry_backoff = ?, result = ?"
    };
}
pub(super) use job_assignments;

/// How many values [`bind_job`] binds.
pub(super) const JOB_COLUMN_COUNT: usize = 17;

/// A text column of the binary collation `utf8mb4_bin`.
///
/// MySQL flags such columns BINARY, and sqlx then refuses to decode them as
/// `String`; this type takes their bytes and checks that they are UTF-8.
#[derive(Debug)]
pub(super) struct Text(pub(super) String);

impl sqlx::Type<MySql> for Text {
    fn type_info() -> MySqlTypeInfo {
        <str as sqlx::Type<MySql>>::type_info()
    }

    fn compatible(ty: &MySqlTypeInfo) -> bool {
        <str as sqlx::Type<MySql>>::compatible(ty) || <[u8] as sqlx::Type<MySql>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, MySql> for Text {
    fn decode(value: MySqlValueRef<'r>) -> Result<Text, BoxDynError> {
        let bytes = <&[u8] as sqlx::Decode<'r, MySql>>::decode(value)?;
        Ok(Text(std::str::from_utf8(bytes)?.to_owned()))
    }
}

fn text(column: Option<Text>) -> Option<String> {
    column.map(|Text(text)| text)
}

/// A `job` row as SQL types.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct JobRow {
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
}

impl JobRow {
    /// Checks and converts the row.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming the first column that does not fit.
    pub(super) fn into_job(self) -> Result<Job, StoreError> {
        let id = JobId::parse(self.id.0).map_err(|error| corrupt("id", error))?;
        Ok(Job {
            topic: Topic::parse(self.topic.0).map_err(|error| corrupt("topic", error))?,
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
        })
    }
}

/// Converts rows, failing on the first corrupt one.
pub(super) fn into_jobs(rows: Vec<JobRow>) -> Result<Vec<Job>, StoreError> {
    rows.into_iter().map(JobRow::into_job).collect()
}

/// A `job_log` row as SQL types.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct LogEntryRow {
    status: Text,
    attempt: i64,
    update_time: i64,
    node: Text,
}

impl LogEntryRow {
    /// Checks and converts the row.
    pub(super) fn into_entry(self) -> Result<LogEntry, StoreError> {
        Ok(LogEntry {
            state: state(&self.status.0)?,
            attempt: number("job_log.attempt", self.attempt)?,
            at: timestamp("job_log.update_time", self.update_time)?,
            node: self.node.0,
        })
    }
}

/// Binds every column of `job` in [`job_columns!`] order.
pub(super) fn bind_job<'q>(query: Query<'q, MySql, MySqlArguments>, job: &'q Job) -> Query<'q, MySql, MySqlArguments> {
    bind_job_assignments(query.bind(job.id.as_str()), job)
}

/// Binds every column of `job` but `id` in [`job_assignments!`] order.
pub(super) fn bind_job_assignments<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    job: &'q Job,
) -> Query<'q, MySql, MySqlArguments> {
    query
        .bind(job.biz_key.as_deref())
        .bind(job.topic.as_str())
        .bind(job.subtopic.as_deref())
        .bind(duration_ms(job.delay))
        .bind(epoch_ms(job.create_time))
        .bind(job.body.as_str())
        .bind(job.state.as_str())
        .bind(duration_ms(job.ttl))
        .bind(epoch_ms(job.updated_at))
        .bind(epoch_ms(job.run_at))
        .bind(duration_ms(job.ttr))
        .bind(i64::from(job.priority))
        .bind(i64::from(job.attempt))
        .bind(i64::from(job.max_retries))
        .bind(encode_backoff(&job.retry_backoff))
        .bind(job.result.as_deref())
}

/// Returns about how many bytes `job` adds to a statement packet.
pub(super) fn job_wire_size(job: &Job) -> usize {
    const FIXED_COLUMNS: usize = 9 * 8 + 64;
    let texts = [job.id.as_str(), job.topic.as_str(), job.body.as_str()].iter().map(|text| text.len()).sum::<usize>();
    let optional = [job.biz_key.as_deref(), job.subtopic.as_deref(), job.result.as_deref()]
        .iter()
        .map(|text| text.map_or(0, str::len))
        .sum::<usize>();
    FIXED_COLUMNS + texts + optional + job.retry_backoff.len() * 21
}

/// Returns an instant as an SQL integer (saturating; no real instant overflows).
pub(super) fn epoch_ms(at: Timestamp) -> i64 {
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

/// Returns a duration as SQL integer milliseconds (saturating).
fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Returns a count or limit as an SQL integer (saturating).
pub(super) fn sql_count(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Encodes the backoff as a JSON array of milliseconds.
fn encode_backoff(backoff: &[Duration]) -> String {
    let millis: Vec<String> = backoff.iter().map(|delay| duration_ms(*delay).to_string()).collect();
    format!("[{}]", millis.join(","))
}

fn decode_backoff(text: &str) -> Result<Vec<Duration>, StoreError> {
    let millis: Vec<u64> = serde_json::from_str(text).map_err(|error| corrupt("retry_backoff", error))?;
    Ok(millis.into_iter().map(Duration::from_millis).collect())
}

/// Parses a `status` column.
pub(super) fn state(name: &str) -> Result<JobState, StoreError> {
    name.parse().map_err(|error| corrupt("status", error))
}

/// Converts an SQL integer, failing on values the domain type cannot hold.
pub(super) fn number<T: TryFrom<i64>>(column: &str, value: i64) -> Result<T, StoreError> {
    T::try_from(value).map_err(|_| StoreError::Corrupt(format!("{column} {value} is out of range")))
}

fn timestamp(column: &str, value: i64) -> Result<Timestamp, StoreError> {
    number(column, value).map(Timestamp::from_millis)
}

fn duration(column: &str, value: i64) -> Result<Duration, StoreError> {
    number(column, value).map(Duration::from_millis)
}

/// Names the column of a value that does not fit its domain type.
pub(super) fn corrupt(column: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{column}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `is_live` and `live_bizkey` are derived from the live states in SQL.
    #[test]
    fn the_migration_derives_liveness_from_every_live_state() {
        let schema = include_str!("../../../../sql/mysql/0001_job.sql");
        let names: Vec<String> = JobState::LIVE.iter().map(|state| format!("'{state}'")).collect();
        let derived = format!("status IN ({})", names.join(", "));
        assert_eq!(schema.matches(derived.as_str()).count(), 2, "is_live and live_bizkey");
    }

    #[test]
    fn column_lists_match_the_bound_count() {
        assert_eq!(job_columns!().split(',').count(), JOB_COLUMN_COUNT);
        assert_eq!(job_assignments!().matches('?').count(), JOB_COLUMN_COUNT - 1);
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
    fn out_of_range_numbers_are_corrupt() {
        assert!(matches!(number::<u8>("priority", 300), Err(StoreError::Corrupt(_))));
        assert!(matches!(timestamp("run_at", -1), Err(StoreError::Corrupt(_))));
        assert_eq!(epoch_ms(Timestamp::from_millis(u64::MAX)), i64::MAX);
    }
}
