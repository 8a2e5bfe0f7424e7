//! Inserting many jobs in few statements, with the outcome of each job its own.
//!
//! Each chunk of jobs is one multi-row upsert, which either writes every row
//! or fails as a whole: when a live job holds an id (in the table, or earlier
//! in the same chunk), or another live job holds a business key, SQLite rolls
//! back just that statement, and the chunk's jobs are inserted one at a time,
//! each judged alone (of two jobs with one id, the first wins).
//!
//! The statement returns no rows: the database connection runs on a thread of
//! its own and sends every row it returns as a message of its own. With
//! `RETURNING id`, and `BEGIN` and `COMMIT` around it, the writer's thread
//! switched context 0.82 times per pushed job under `/push` load; now 0.30.

use std::borrow::Cow;

use delayq_common::Job;
use sqlx::{QueryBuilder, Sqlite};

use super::dialect::{
    is_not_null_violation, is_unique_violation, SqliteDialect, SqliteTx, BULK_UPSERT_CONFLICT_CLAUSE,
};
use super::rows::{duration_ms, encode_backoff, epoch_ms, job_columns};
use crate::store::{BoxError, StoreError};
use crate::writer::BatchDialect;

/// Jobs per multi-row statement (17 parameters each, far below SQLite's 32766).
const JOBS_PER_STATEMENT: usize = 256;

type Outcomes = Vec<Result<(), StoreError>>;

/// Inserts `jobs` in order; one outcome per job, as [`BatchDialect::insert_job`] would give.
pub(super) async fn insert_jobs(
    dialect: &SqliteDialect,
    tx: &mut SqliteTx,
    jobs: &[&Job],
) -> Result<Outcomes, BoxError> {
    let mut outcomes: Outcomes = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(JOBS_PER_STATEMENT) {
        let head = tx.statement(INSERT_HEAD);
        match upsert_chunk(tx, head, chunk, "").await {
            Ok(()) => outcomes.extend(chunk.iter().map(|_| Ok(()))),
            Err(error) if is_refusal(&error) => {
                for job in chunk {
                    outcomes.push(dialect.insert_job(tx, job).await?);
                }
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(outcomes)
}

/// Inserts `jobs` of a batch that has run no statement yet, and commits, in
/// one statement when they fit one; `None` when they do not, or when an id or
/// a business key was refused: nothing is written then, and `tx` is still to
/// begin, for [`insert_jobs`] to judge each job.
///
/// The statement runs outside `BEGIN` and `COMMIT`, as a transaction of its
/// own that SQLite commits when it ends: the connection's thread has one
/// statement to run and one answer to send instead of three.
pub(super) async fn insert_jobs_and_commit(tx: &mut SqliteTx, jobs: &[&Job]) -> Result<Option<Outcomes>, BoxError> {
    if jobs.len() > JOBS_PER_STATEMENT || !tx.is_unbegun() {
        return Ok(None);
    }
    match upsert_chunk(tx, INSERT_HEAD.into(), jobs, "").await {
        Ok(()) => Ok(Some(jobs.iter().map(|_| Ok(())).collect())),
        Err(error) if is_refusal(&error) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Whether a chunk failed because some job in it is refused (its id or its
/// business key is held by a live job), not because the database failed.
fn is_refusal(error: &sqlx::Error) -> bool {
    is_unique_violation(error) || is_not_null_violation(error)
}

const INSERT_HEAD: &str = concat!("INSERT INTO job (", job_columns!(), ") ");

/// Writes all of `jobs` in one statement that starts with `head` (the insert,
/// led by `BEGIN` or not), followed by `tail`, or none of them.
async fn upsert_chunk(tx: &mut SqliteTx, head: Cow<'_, str>, jobs: &[&Job], tail: &str) -> Result<(), sqlx::Error> {
    let mut query = QueryBuilder::<Sqlite>::new(head);
    query.push_values(jobs, |mut row, job| {
        row.push_bind(job.id.as_str())
            .push_bind(job.biz_key.as_deref())
            .push_bind(job.topic.as_str())
            .push_bind(job.subtopic.as_deref())
            .push_bind(duration_ms(job.delay))
            .push_bind(epoch_ms(job.create_time))
            .push_bind(job.body.as_str())
            .push_bind(job.state.as_str())
            .push_bind(duration_ms(job.ttl))
            .push_bind(epoch_ms(job.updated_at))
            .push_bind(epoch_ms(job.run_at))
            .push_bind(duration_ms(job.ttr))
            .push_bind(i64::from(job.priority))
            .push_bind(i64::from(job.attempt))
            .push_bind(i64::from(job.max_retries))
            .push_bind(encode_backoff(&job.retry_backoff))
            .push_bind(job.result.as_deref());
    });
    query.push(BULK_UPSERT_CONFLICT_CLAUSE);
    query.push(tail);
    query.build().execute(tx.connection()).await.map(drop)
}
