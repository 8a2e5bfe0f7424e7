//! Inserting many jobs in few statements, with the outcome of each job its own.
//!
//! The writer holds the write lock for the whole batch (`BEGIN IMMEDIATE`), so
//! the live ids and business keys read at the start stay true until the commit:
//! one read decides every job (in order, the first of two equal ids or keys
//! winning), then the accepted jobs go in as multi-row upserts. Should a chunk
//! still hit the business-key index, that statement is rolled back alone and
//! its jobs are inserted one at a time.

use std::collections::{HashMap, HashSet};

use delayq_common::Job;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use super::dialect::{is_unique_violation, SqliteDialect, UPSERT_CONFLICT_CLAUSE};
use super::rows::{duration_ms, encode_backoff, epoch_ms, job_columns, live_states};
use crate::store::{BoxError, StoreError};
use crate::writer::BatchDialect;

/// Jobs per multi-row statement (17 parameters each, far below SQLite's 32766).
const JOBS_PER_STATEMENT: usize = 256;
/// Below this many jobs, one statement per job is as cheap as the bulk path.
pub(super) const BULK_THRESHOLD: usize = 4;

type Outcomes = Vec<Result<(), StoreError>>;

/// Inserts `jobs` in order; one outcome per job, as [`BatchDialect::insert_job`] would give.
pub(super) async fn insert_jobs(
    dialect: &SqliteDialect,
    tx: &mut <SqliteDialect as BatchDialect>::Tx,
    jobs: &[&Job],
) -> Result<Outcomes, BoxError> {
    let mut live = LiveHolders::read(tx, jobs).await?;
    let mut outcomes: Outcomes = Vec::with_capacity(jobs.len());
    let mut accepted: Vec<(usize, &Job)> = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.iter().enumerate() {
        let outcome = live.admit(job);
        if outcome.is_ok() {
            accepted.push((index, job));
        }
        outcomes.push(outcome);
    }
    for chunk in accepted.chunks(JOBS_PER_STATEMENT) {
        let chunk_jobs: Vec<&Job> = chunk.iter().map(|(_, job)| *job).collect();
        match upsert_chunk(tx, &chunk_jobs).await {
            Ok(written) if written == chunk_jobs.len() as u64 => {}
            Ok(written) => {
                return Err(format!("{written} of {} checked jobs were written", chunk_jobs.len()).into());
            }
            Err(error) if is_unique_violation(&error) => {
                for (index, job) in chunk {
                    outcomes[*index] = dialect.insert_job(tx, job).await?;
                }
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(outcomes)
}

/// The live jobs holding the ids and business keys of a batch.
struct LiveHolders {
    ids: HashSet<String>,
    /// (topic, business key) to the id of the live job holding it.
    keys: HashMap<(String, String), String>,
}

impl LiveHolders {
    async fn read(connection: &mut SqliteConnection, jobs: &[&Job]) -> Result<LiveHolders, sqlx::Error> {
        let mut ids = HashSet::new();
        for chunk in jobs.chunks(JOBS_PER_STATEMENT) {
            let mut query = QueryBuilder::<Sqlite>::new(concat!("SELECT id FROM job WHERE status IN ", live_states!()));
            query.push(" AND id IN (");
            let mut list = query.separated(", ");
            for job in chunk {
                list.push_bind(job.id.as_str());
            }
            query.push(")");
            let found: Vec<String> = query.build_query_scalar().fetch_all(&mut *connection).await?;
            ids.extend(found);
        }
        let keyed: Vec<&Job> = jobs.iter().copied().filter(|job| job.biz_key.is_some()).collect();
        let mut keys = HashMap::new();
        for chunk in keyed.chunks(JOBS_PER_STATEMENT) {
            let mut query = QueryBuilder::<Sqlite>::new("WITH wanted (topic, bizkey) AS (");
            query.push_values(chunk, |mut row, job| {
                row.push_bind(job.topic.as_str()).push_bind(job.biz_key.as_deref());
            });
            query.push(concat!(
                ") SELECT job.topic, job.bizkey, job.id FROM wanted \
                 JOIN job ON job.topic = wanted.topic AND job.bizkey = wanted.bizkey \
                 WHERE job.status IN ",
                live_states!()
            ));
            let found: Vec<(String, String, String)> = query.build_query_as().fetch_all(&mut *connection).await?;
            keys.extend(found.into_iter().map(|(topic, biz_key, id)| ((topic, biz_key), id)));
        }
        Ok(LiveHolders { ids, keys })
    }

    /// Judges `job` against the live jobs so far; an accepted live job holds its id and key from now on.
    fn admit(&mut self, job: &Job) -> Result<(), StoreError> {
        if self.ids.contains(job.id.as_str()) {
            return Err(StoreError::IdTaken(job.id.clone()));
        }
        if let Some(biz_key) = &job.biz_key {
            let key = (job.topic.as_str().to_owned(), biz_key.clone());
            if let Some(holder) = self.keys.get(&key) {
                return Err(StoreError::BizKeyTaken {
                    topic: job.topic.clone(),
                    biz_key: biz_key.clone(),
                    id: holder.clone(),
                });
            }
            if job.state.is_live() {
                self.keys.insert(key, job.id.as_str().to_owned());
            }
        }
        if job.state.is_live() {
            self.ids.insert(job.id.as_str().to_owned());
        }
        Ok(())
    }
}

/// Writes checked jobs in one statement; returns how many rows it inserted or overwrote.
async fn upsert_chunk(connection: &mut SqliteConnection, jobs: &[&Job]) -> Result<u64, sqlx::Error> {
    let mut query = QueryBuilder::<Sqlite>::new(concat!("INSERT INTO job (", job_columns!(), ") "));
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
    Ok(query.build().execute(connection).await?.rows_affected())
}
