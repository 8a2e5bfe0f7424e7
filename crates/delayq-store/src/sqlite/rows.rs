//! Mapping between `job` rows and [`Job`]s: column lists, bound values and decoding.

use std::time::Duration;

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;
use sqlx::Sqlite;

use crate::store::{LogEntry, StoreError};

/// The live states as an SQL list; the partial indexes of `sql/sqlite` carry the
/// same literal text, which is what lets SQLite use them.
macro_rules! live_states {
    () => {
        "('delay', 'ready', 'reserved')"
    };
}
pub(super) use live_states;

/// Every column of `job`, in the order of [`JobRow`] and [`bind_job`] (`?1` to `?17`).
macro_rules! job_columns {
    () => {
        "id, bizkey, topic, subtopic, delay, create_time, body, status, ttl, update_time, \
         run_at, ttr, priority, attempt, max_retries, retry_backoff, result"
    };
}
pub(super) use job_columns;

/// A `job` row as SQL types.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct JobRow {
    id: String,
    bizkey: Option<String>,
    topic: String,
    subtopic: Option<String>,
    delay: i64,
    create_time: i64,
    body: String,
    status: String,
    ttl: i64,
    update_time: i64,
    run_at: i64,
    ttr: i64,
    priority: i64,
    attempt: i64,
    max_retries: i64,
    retry_backoff: String,
    result: Option<String>,
}

impl JobRow {
    /// Checks and converts the row.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming the first column that does not fit.
    pub(super) fn into_job(self) -> Result<Job, StoreError> {
        let id = JobId::parse(self.id).map_err(|error| corrupt("id", error))?;
        Ok(Job {
            topic: Topic::parse(self.topic).map_err(|error| corrupt("topic", error))?,
            subtopic: self.subtopic,
            body: self.body,
            biz_key: self.bizkey,
            create_time: timestamp("create_time", self.create_time)?,
            delay: duration("delay", self.delay)?,
            run_at: timestamp("run_at", self.run_at)?,
            ttr: duration("ttr", self.ttr)?,
            priority: number("priority", self.priority)?,
            max_retries: number("max_retries", self.max_retries)?,
            retry_backoff: decode_backoff(&self.retry_backoff)?,
            ttl: duration("ttl", self.ttl)?,
            attempt: number("attempt", self.attempt)?,
            state: state(&self.status)?,
            result: self.result,
            updated_at: timestamp("update_time", self.update_time)?,
            id,
        })
    }
}

/// A `job_log` row as SQL types.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct LogEntryRow {
    status: String,
    attempt: i64,
    update_time: i64,
    node: String,
}

impl LogEntryRow {
    /// Checks and converts the row.
    pub(super) fn into_entry(self) -> Result<LogEntry, StoreError> {
        Ok(LogEntry {
            state: state(&self.status)?,
            attempt: number("job_log.attempt", self.attempt)?,
            at: timestamp("job_log.update_time", self.update_time)?,
            node: self.node,
        })
    }
}

/// Binds every column of `job` in [`job_columns!`] order.
pub(super) fn bind_job<'q>(
    query: Query<'q, Sqlite, SqliteArguments<'q>>,
    job: &'q Job,
) -> Query<'q, Sqlite, SqliteArguments<'q>> {
    query
        .bind(job.id.as_str())
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

/// Returns an instant as an SQL integer (saturating; no real instant overflows).
pub(super) fn epoch_ms(at: Timestamp) -> i64 {
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

/// Returns a duration as SQL integer milliseconds (saturating).
pub(super) fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Returns a count or limit as an SQL integer (saturating).
pub(super) fn sql_count(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Encodes the backoff as a JSON array of milliseconds.
pub(super) fn encode_backoff(backoff: &[Duration]) -> String {
    let millis: Vec<String> = backoff.iter().map(|delay| duration_ms(*delay).to_string()).collect();
    format!("[{}]", millis.join(","))
}

fn decode_backoff(text: &str) -> Result<Vec<Duration>, StoreError> {
    let millis: Vec<u64> = serde_json::from_str(text).map_err(|error| corrupt("retry_backoff", error))?;
    Ok(millis.into_iter().map(Duration::from_millis).collect())
}

pub(super) fn state(name: &str) -> Result<JobState, StoreError> {
    name.parse().map_err(|error| corrupt("status", error))
}

pub(super) fn number<T: TryFrom<i64>>(column: &str, value: i64) -> Result<T, StoreError> {
    T::try_from(value).map_err(|_| StoreError::Corrupt(format!("{column} {value} is out of range")))
}

fn timestamp(column: &str, value: i64) -> Result<Timestamp, StoreError> {
    number(column, value).map(Timestamp::from_millis)
}

fn duration(column: &str, value: i64) -> Result<Duration, StoreError> {
    number(column, value).map(Duration::from_millis)
}

fn corrupt(column: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{column}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_states_list_every_live_state() {
        let names: Vec<String> = JobState::LIVE.iter().map(|state| format!("'{state}'")).collect();
        assert_eq!(live_states!(), format!("({})", names.join(", ")));
    }

    #[test]
    fn backoff_round_trips_as_json_milliseconds() {
        let backoff = vec![Duration::from_millis(100), Duration::from_secs(2)];
        assert_eq!(encode_backoff(&backoff), "[100,2000]");
        assert_eq!(decode_backoff("[100,2000]").expect("valid json"), backoff);
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
