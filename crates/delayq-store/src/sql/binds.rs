//! Binding a job, a state change and a history line to a statement, in one
//! order for both databases; the text of the multi-row statements that take
//! many of them, and of the few statements both dialects write alike.

use delayq_common::Job;
use sqlx::query::Query;
use sqlx::{Database, Encode, Type};

use super::rows::{duration_ms, encode_backoff, encode_groups, epoch_ms, job_columns};
use crate::store::StateChange;
use crate::writer::LogRow;

/// A statement that takes values in order: its `?`s, one after another.
pub(crate) trait Bind<'q>: Sized {
    /// Binds a text.
    fn text(self, value: &'q str) -> Self;
    /// Binds a text or NULL.
    fn optional_text(self, value: Option<&'q str>) -> Self;
    /// Binds a text the statement owns.
    fn owned_text(self, value: String) -> Self;
    /// Binds a text the statement owns, or NULL.
    fn optional_owned_text(self, value: Option<String>) -> Self;
    /// Binds an integer.
    fn integer(self, value: i64) -> Self;
}

impl<'q, DB> Bind<'q> for Query<'q, DB, <DB as Database>::Arguments<'q>>
where
    DB: Database,
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    String: Encode<'q, DB> + Type<DB>,
    Option<String>: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    fn text(self, value: &'q str) -> Self {
        self.bind(value)
    }

    fn optional_text(self, value: Option<&'q str>) -> Self {
        self.bind(value)
    }

    fn owned_text(self, value: String) -> Self {
        self.bind(value)
    }

    fn optional_owned_text(self, value: Option<String>) -> Self {
        self.bind(value)
    }

    fn integer(self, value: i64) -> Self {
        self.bind(value)
    }
}

/// The head of a multi-row insert of jobs, each bound by [`bind_job`].
pub(crate) const INSERT_JOB_ROWS: &str = concat!("INSERT INTO job (", job_columns!(), ") VALUES ");

/// Binds every column of `job` in [`job_columns!`](super::rows::job_columns) order.
pub(crate) fn bind_job<'q, B: Bind<'q>>(query: B, job: &'q Job) -> B {
    bind_job_assignments(query.text(job.id.as_str()), job)
}

/// Binds every column of `job` but `id`, in [`job_columns!`](super::rows::job_columns) order.
pub(crate) fn bind_job_assignments<'q, B: Bind<'q>>(query: B, job: &'q Job) -> B {
    query
        .optional_text(job.biz_key.as_deref())
        .text(job.topic.as_str())
        .optional_text(job.subtopic.as_deref())
        .integer(duration_ms(job.delay))
        .integer(epoch_ms(job.create_time))
        .text(job.body.as_str())
        .text(job.state.as_str())
        .integer(duration_ms(job.ttl))
        .integer(epoch_ms(job.updated_at))
        .integer(epoch_ms(job.run_at))
        .integer(duration_ms(job.ttr))
        .integer(i64::from(job.priority))
        .integer(i64::from(job.attempt))
        .integer(i64::from(job.max_retries))
        .owned_text(encode_backoff(&job.retry_backoff))
        .optional_text(job.result.as_deref())
        .optional_owned_text(encode_groups(&job.groups))
}

/// Binds what a state change sets: `status`, `attempt`, `run_at`, `update_time`, `result`.
pub(crate) fn bind_change<'q, B: Bind<'q>>(query: B, change: &'q StateChange) -> B {
    query
        .text(change.state.as_str())
        .integer(i64::from(change.attempt))
        .integer(epoch_ms(change.run_at))
        .integer(epoch_ms(change.at))
        .optional_text(change.result.as_deref())
}

/// The head of a multi-row insert of history lines, bound by [`bind_log_row`].
pub(crate) const INSERT_LOG_ROWS: &str =
    "INSERT INTO job_log (job_id, status, attempt, node, update_time, host) VALUES ";
/// How many values [`bind_log_row`] binds.
pub(crate) const LOG_COLUMN_COUNT: usize = 6;

/// Binds a history line as [`INSERT_LOG_ROWS`] lists its columns; `node` and
/// `host` name the process that writes it.
pub(crate) fn bind_log_row<'q, B: Bind<'q>>(query: B, row: &'q LogRow, node: &'q str, host: &'q str) -> B {
    query
        .text(row.job_id.as_str())
        .text(row.state.as_str())
        .integer(i64::from(row.attempt))
        .text(node)
        .integer(epoch_ms(row.at))
        .text(host)
}

/// Binds each of `texts`, in order.
pub(crate) fn bind_texts<'q, B: Bind<'q>, T: AsRef<str>>(query: B, texts: &'q [T]) -> B {
    texts.iter().fold(query, |query, text| query.text(text.as_ref()))
}

/// Deletes the history of the jobs whose ids follow (`?, ?, …)`, see [`in_list`]).
pub(crate) const DELETE_HISTORY_OF: &str = "DELETE FROM job_log WHERE job_id IN (";

/// Returns `count` placeholders separated by commas.
pub(crate) fn placeholders(count: usize) -> String {
    vec!["?"; count].join(", ")
}

/// Builds `prefix (?, …), (?, …), …` with `rows` tuples of `columns` placeholders.
pub(crate) fn multi_row_values(prefix: &str, columns: usize, rows: usize) -> String {
    let tuple = format!("({})", placeholders(columns));
    format!("{prefix}{}", vec![tuple.as_str(); rows].join(", "))
}

/// Builds `head` (ending in `IN (`) followed by `count` placeholders and `)`.
pub(crate) fn in_list(head: &str, count: usize) -> String {
    format!("{head}{})", placeholders(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_row_values_have_one_tuple_per_row() {
        assert_eq!(
            multi_row_values("INSERT INTO t (a, b) VALUES ", 2, 3),
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?)"
        );
    }

    #[test]
    fn in_lists_close_their_parenthesis() {
        assert_eq!(in_list("DELETE FROM t WHERE id IN (", 3), "DELETE FROM t WHERE id IN (?, ?, ?)");
    }

    #[test]
    fn the_log_head_lists_every_bound_column() {
        let columns = INSERT_LOG_ROWS.split_once('(').and_then(|(_, rest)| rest.split_once(')'));
        assert_eq!(columns.map(|(list, _)| list.split(',').count()), Some(LOG_COLUMN_COUNT));
    }
}
