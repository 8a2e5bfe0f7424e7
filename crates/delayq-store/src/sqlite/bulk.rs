//! Inserting many jobs in few statements, with the outcome of each job its own.
//!
//! Each chunk of jobs is one multi-row upsert that returns the ids it wrote:
//! a job whose id a live job holds changes no row (the conflict clause only
//! overwrites ended jobs), so it is missing from the answer and refused. Rows
//! go in in order, so of two jobs with one id in a chunk the first wins. A chunk
//! that hits the business-key index fails as a whole (SQLite rolls back just
//! that statement) and its jobs are inserted one at a time, each judged alone.

use std::collections::HashSet;

use delayq_common::Job;
use sqlx::{QueryBuilder, Sqlite};

use super::dialect::{is_unique_violation, SqliteDialect, SqliteTx, UPSERT_CONFLICT_CLAUSE};
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
        match upsert_chunk(tx, chunk, "").await {
            Ok(written) => outcomes.extend(judge(chunk, written)),
            Err(error) if is_unique_violation(&error) => {
                for job in chunk {
                    outcomes.push(dialect.insert_job(tx, job).await?);
                }
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(outcomes)
}

/// Inserts `jobs` and commits in one statement when they fit one; `None` when
/// they do not, or when a business key was refused: the transaction is then
/// still open, with nothing written, for [`insert_jobs`] to judge each job.
pub(super) async fn insert_jobs_and_commit(tx: &mut SqliteTx, jobs: &[&Job]) -> Result<Option<Outcomes>, BoxError> {
    if jobs.len() > JOBS_PER_STATEMENT {
        return Ok(None);
    }
    match upsert_chunk(tx, jobs, "; COMMIT").await {
        Ok(written) => Ok(Some(judge(jobs, written).collect())),
        Err(error) if is_unique_violation(&error) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// The outcome of each job of a chunk that wrote the rows of `written`.
fn judge<'j>(chunk: &'j [&Job], written: Vec<String>) -> impl Iterator<Item = Result<(), StoreError>> + 'j {
    let mut written: HashSet<String> = written.into_iter().collect();
    chunk.iter().map(move |job| {
        // The first job of an id takes its written row; a repeat was refused.
        if written.remove(job.id.as_str()) {
            Ok(())
        } else {
            Err(StoreError::IdTaken(job.id.clone()))
        }
    })
}

/// Writes jobs in one statement, followed by `tail`; returns the ids of the
/// rows it inserted or overwrote.
async fn upsert_chunk(tx: &mut SqliteTx, jobs: &[&Job], tail: &str) -> Result<Vec<String>, sqlx::Error> {
    let mut query = QueryBuilder::<Sqlite>::new(tx.statement(concat!("INSERT INTO job (", job_columns!(), ") ")));
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
    query.push(UPSERT_CONFLICT_CLAUSE);
    query.push(" RETURNING id");
    query.push(tail);
    query.build_query_scalar().fetch_all(tx.connection()).await
}
