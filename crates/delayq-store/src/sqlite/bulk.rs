//! Inserting many jobs in one statement: a multi-row upsert that writes every
//! row or none.
//!
//! When a live job holds an id (in the table, or earlier in the same chunk), or
//! another live job holds a business key, SQLite rolls back just that
//! statement and the upsert reports [`Upsert::Refused`]; the dialect then
//! judges the chunk's jobs one at a time (of two jobs with one id, the first
//! wins).
//!
//! The statement returns no rows: the database connection runs on a thread of
//! its own and sends every row it returns as a message of its own, each one a
//! wake-up of the writer (docs/design.md, "Group commit on one connection").

use std::borrow::Cow;

use delayq_common::Job;
use sqlx::error::ErrorKind;

use super::rows::{live_states, overwrite_on_conflict};
use super::tx::SqliteTx;
use crate::sql::binds::{bind_job, multi_row_values, INSERT_JOB_ROWS};
use crate::sql::is_unique_violation;
use crate::sql::rows::JOB_COLUMN_COUNT;

/// Jobs per multi-row statement (18 parameters each, far below SQLite's 32766).
pub(super) const JOBS_PER_STATEMENT: usize = 256;

/// The conflict clause of a multi-row insert: as the single insert's (see the
/// dialect), but a live job holding an id fails the whole statement instead of
/// leaving its row alone. Its status would become NULL, which the column
/// refuses; SQLite then rolls back just that statement. So a statement that
/// succeeds wrote every one of its rows, and says so without returning one row
/// per job.
const CONFLICT_CLAUSE: &str =
    overwrite_on_conflict!("CASE WHEN job.status IN ", live_states!(), " THEN NULL ELSE excluded.status END");

/// What a multi-row upsert did.
pub(super) enum Upsert {
    /// Every job is written.
    Written,
    /// Nothing is written: a job is refused (a live job holds its id or its
    /// business key), so each job is to be judged alone.
    Refused,
}

/// The transaction an upsert runs in.
pub(super) enum Scope {
    /// The batch's: the upsert begins it when it is the batch's first statement.
    Batch,
    /// One of its own, outside `BEGIN` and `COMMIT`, which SQLite commits as the
    /// statement ends: the connection's thread has one statement to run and one
    /// answer to send instead of three. The batch stays unbegun.
    Own,
}

/// Writes all of `jobs` (at most [`JOBS_PER_STATEMENT`]) in one statement, or none of them.
pub(super) async fn upsert(tx: &mut SqliteTx, jobs: &[&Job], scope: Scope) -> Result<Upsert, sqlx::Error> {
    debug_assert!(jobs.len() <= JOBS_PER_STATEMENT);
    let head = match scope {
        Scope::Batch => tx.statement(INSERT_JOB_ROWS),
        Scope::Own => Cow::Borrowed(INSERT_JOB_ROWS),
    };
    let sql = multi_row_values(&head, JOB_COLUMN_COUNT, jobs.len()) + CONFLICT_CLAUSE;
    let upsert = jobs.iter().fold(sqlx::query(&sql), |query, job| bind_job(query, job));
    match upsert.execute(tx.connection()).await {
        Ok(_) => Ok(Upsert::Written),
        Err(error) if is_refusal(&error) => Ok(Upsert::Refused),
        Err(error) => Err(error),
    }
}

/// Whether an upsert failed because a job in it is refused (a unique index,
/// or the NULL status of [`CONFLICT_CLAUSE`]), not because the database failed.
fn is_refusal(error: &sqlx::Error) -> bool {
    let not_null = |error: &sqlx::Error| {
        error.as_database_error().is_some_and(|database| matches!(database.kind(), ErrorKind::NotNullViolation))
    };
    is_unique_violation(error) || not_null(error)
}
