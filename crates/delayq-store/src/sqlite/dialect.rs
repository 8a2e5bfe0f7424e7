//! The SQLite statements of the group-commit writer.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use delayq_common::{Job, JobId, Timestamp};
use sqlx::sqlite::{SqliteConnectOptions, SqliteRow};
use sqlx::{Connection, Executor, Row, SqliteConnection};

use super::bulk::{self, Scope, Upsert, JOBS_PER_STATEMENT};
use super::rows::{live_states, overwrite_on_conflict};
use super::tx::SqliteTx;
use crate::sql::binds::{
    bind_change, bind_job, bind_log_row, bind_texts, in_list, multi_row_values, Bind, DELETE_HISTORY_OF,
    INSERT_LOG_ROWS, LOG_COLUMN_COUNT,
};
use crate::sql::is_unique_violation;
use crate::sql::rows::{biz_key_taken, epoch_ms, id_and_attempt, job_columns, sql_count};
use crate::store::{BoxError, StateChange, StoreError};
use crate::writer::{collapse, moves_forward, BatchDialect, InsertOutcomes, LogRow, PurgeOf};

/// Inserts one job, bound by [`bind_job`]; returns its id when it wrote a row.
/// A row with the same id is overwritten only when its job has ended; when a
/// live job holds the id, no row changes. The business-key index refuses a key
/// held by another live job.
///
/// This and the other single-row changes tell what they did by the row they
/// return, not by a count of changed rows: they may carry the batch's `BEGIN`
/// ([`SqliteTx::statement`]), and SQLite reports that statement with the count
/// of the change before it.
const INSERT_JOB: &str = concat!(
    "INSERT INTO job (",
    job_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
    overwrite_on_conflict!("excluded.status"),
    " WHERE job.status NOT IN ",
    live_states!(),
    " RETURNING id"
);

/// Overwrites every column of a live job (bound like [`INSERT_JOB`]); returns its id when it did.
const REPLACE_JOB: &str = concat!(
    "UPDATE job SET bizkey = ?2, topic = ?3, subtopic = ?4, delay = ?5, create_time = ?6, \
     body = ?7, status = ?8, ttl = ?9, update_time = ?10, run_at = ?11, ttr = ?12, \
     priority = ?13, attempt = ?14, max_retries = ?15, retry_backoff = ?16, result = ?17, \
     job_groups = ?18 WHERE id = ?1 AND status IN ",
    live_states!(),
    " RETURNING id"
);

/// Moves live jobs forward; ended jobs never move, so a late journal entry
/// cannot revive one. A change that would take a live job back
/// ([`moves_forward`]) leaves its row as it is but still counts (its history
/// line is written). Each column takes its new value when the change moves the
/// row forward, else keeps its own: SQLite reads the old row in every `SET`
/// expression, so each can test the same condition.
///
/// `$row` prefixes the row's columns ("" or "job."), `$from` names where the
/// changes come from, `$id` is the id of a change's job; the rest are its new
/// values. Returns the ids of the live jobs it was given.
macro_rules! move_forward {
    ($row:literal, $from:literal, $id:literal, $status:literal, $attempt:literal, $run_at:literal,
     $update_time:literal, $result:literal) => {
        concat!(
            "UPDATE job SET status = ",
            forward_or_keep!($row, $status, $attempt, $status, "status"),
            ", attempt = ",
            forward_or_keep!($row, $status, $attempt, $attempt, "attempt"),
            ", run_at = ",
            forward_or_keep!($row, $status, $attempt, $run_at, "run_at"),
            ", update_time = ",
            forward_or_keep!($row, $status, $attempt, $update_time, "update_time"),
            ", result = ",
            forward_or_keep!($row, $status, $attempt, $result, "result"),
            $from,
            " WHERE ",
            $row,
            "id = ",
            $id,
            " AND ",
            $row,
            "status IN ",
            live_states!(),
            " RETURNING ",
            $row,
            "id"
        )
    };
}

/// `$new` when the change (`$status`, `$attempt`) moves the row forward, else the row's `$column`.
macro_rules! forward_or_keep {
    ($row:literal, $status:literal, $attempt:literal, $new:literal, $column:literal) => {
        concat!(
            "CASE WHEN ",
            moves_forward!(concat!($row, "status"), concat!($row, "attempt"), $status, $attempt),
            " THEN ",
            $new,
            " ELSE ",
            $row,
            $column,
            " END"
        )
    };
}

/// Moves one live job forward (see [`move_forward!`]); binds as [`bind_change`], then the id.
const CHANGE_STATE: &str = move_forward!("", "", "?6", "?1", "?2", "?3", "?4", "?5");

/// The head of many jobs' changes, followed by their values and [`CHANGE_STATES_TAIL`].
const CHANGE_STATES_HEAD: &str = "WITH v (id, status, attempt, run_at, update_time, result) AS (VALUES ";
/// The values of one change in [`CHANGE_STATES_HEAD`]: the id, then those of [`bind_change`].
const CHANGE_VALUES: usize = 6;
/// Moves many live jobs forward at once (see [`move_forward!`]).
const CHANGE_STATES_TAIL: &str = concat!(
    ") ",
    move_forward!("job.", " FROM v", "v.id", "v.status", "v.attempt", "v.run_at", "v.update_time", "v.result")
);

/// State changes per multi-row update (6 parameters each, far below SQLite's 32766).
const CHANGES_PER_STATEMENT: usize = 512;

const DELETE_ALL_LIVE: &str = concat!(
    "UPDATE job SET status = 'deleted', update_time = ? WHERE status IN ",
    live_states!(),
    " RETURNING id, attempt"
);

/// The ended jobs to purge, oldest end first, from the index of ended rows
/// (`job_ended_update_time_idx`, whose `WHERE` this repeats).
const SELECT_EXPIRED: &str = concat!(
    "SELECT id FROM job WHERE status NOT IN ",
    live_states!(),
    " AND update_time < ? ORDER BY update_time LIMIT ?"
);

/// The dead jobs of a topic to purge (`job_topic_status_id_idx`).
const SELECT_DEAD: &str = "SELECT id FROM job WHERE topic = ? AND status = 'dead' ORDER BY id LIMIT ?";
/// One job to purge if it is dead.
const SELECT_DEAD_JOB: &str = "SELECT id FROM job WHERE id = ? AND status = 'dead' LIMIT ?";

/// The ended jobs among the ids that follow (`?, ?, …)`).
const DELETE_ENDED_JOBS: &str = concat!("DELETE FROM job WHERE status NOT IN ", live_states!(), " AND id IN (");

/// Counts that fell to 0 once their jobs were purged or pushed again.
const DELETE_EMPTY_COUNTS: &str = "DELETE FROM job_ended_count WHERE jobs <= 0";

const LIVE_HOLDER_OF_BIZ_KEY: &str =
    concat!("SELECT id FROM job WHERE topic = ? AND bizkey = ? AND status IN ", live_states!());

/// History rows per multi-row insert (6 parameters each, far below SQLite's 32766).
const LOG_ROWS_PER_STATEMENT: usize = 512;

/// The SQLite side of the writer: its one connection and who writes.
///
/// The connection is the writer's own, not a pool's: a batch takes it and
/// gives it back without a round trip through a pool (which would ping it and
/// return it from a task of its own, each a wait for the runtime). A batch that
/// fails drops it, which rolls its transaction back; the next one reconnects.
pub(super) struct SqliteDialect {
    options: SqliteConnectOptions,
    /// [`history_triggers`] of this node, installed on every connection.
    triggers: String,
    idle: Mutex<Option<SqliteConnection>>,
    node: String,
    host: String,
}

impl SqliteDialect {
    /// Starts with `connection`, opened with `options` (which reconnect after a
    /// failed batch), and installs the history triggers on it.
    pub(super) async fn open(
        options: SqliteConnectOptions,
        connection: SqliteConnection,
        node: String,
        host: String,
    ) -> Result<SqliteDialect, sqlx::Error> {
        let triggers = history_triggers(&node, &host);
        let connection = with_triggers(connection, &triggers).await?;
        Ok(SqliteDialect { options, triggers, idle: Mutex::new(Some(connection)), node, host })
    }

    fn put_back(&self, connection: SqliteConnection) {
        *self.idle.lock().unwrap_or_else(PoisonError::into_inner) = Some(connection);
    }

    /// Runs `sql`, a write of `job` bound by [`bind_job`] that returns its id
    /// when it wrote the row; when it did not, the job is refused as `unwritten`.
    async fn write_job(
        &self,
        tx: &mut SqliteTx,
        sql: &str,
        job: &Job,
        unwritten: fn(JobId) -> StoreError,
    ) -> Result<Result<(), StoreError>, BoxError> {
        let sql = tx.statement(sql);
        match bind_job(sqlx::query(&sql), job).fetch_optional(tx.connection()).await {
            Ok(Some(_)) => Ok(Ok(())),
            Ok(None) => Ok(Err(unwritten(job.id.clone()))),
            Err(error) if is_unique_violation(&error) => Ok(Err(self.biz_key_taken(tx.connection(), job).await?)),
            Err(error) => Err(error.into()),
        }
    }

    /// Turns a refused business key into [`StoreError::BizKeyTaken`] naming its holder.
    async fn biz_key_taken(&self, connection: &mut SqliteConnection, job: &Job) -> Result<StoreError, BoxError> {
        let biz_key = job.biz_key.as_deref().unwrap_or_default();
        let holder = sqlx::query_scalar(LIVE_HOLDER_OF_BIZ_KEY).bind(job.topic.as_str()).bind(biz_key);
        Ok(biz_key_taken(job, holder.fetch_optional(connection).await?))
    }

    /// Applies the changes of one chunk, collapsed, in one statement; returns
    /// whether each applied.
    async fn change_chunk(&self, tx: &mut SqliteTx, chunk: &[&StateChange]) -> Result<Vec<bool>, BoxError> {
        let collapsed = collapse(chunk);
        let changed: HashSet<String> = if let [change] = collapsed.decisive.as_slice() {
            let changed = self.change_state(tx, change).await?;
            changed.then(|| change.id.to_string()).into_iter().collect()
        } else {
            let head = tx.statement(CHANGE_STATES_HEAD);
            let sql = multi_row_values(&head, CHANGE_VALUES, collapsed.decisive.len()) + CHANGE_STATES_TAIL;
            let update = collapsed
                .decisive
                .iter()
                .fold(sqlx::query(&sql), |query, change| bind_change(query.text(change.id.as_str()), change));
            let ids = update.try_map(|row: SqliteRow| row.try_get::<String, _>(0));
            ids.fetch_all(tx.connection()).await?.into_iter().collect()
        };
        Ok(collapsed.applied(|id| changed.contains(id)))
    }

    /// Appends `log` in multi-row inserts, the last one followed by `tail`.
    async fn write_log(&self, tx: &mut SqliteTx, log: &[LogRow], tail: &str) -> Result<(), BoxError> {
        let chunks = log.chunks(LOG_ROWS_PER_STATEMENT);
        let last = chunks.len();
        for (index, chunk) in chunks.enumerate() {
            let head = tx.statement(INSERT_LOG_ROWS);
            let mut sql = multi_row_values(&head, LOG_COLUMN_COUNT, chunk.len());
            if index + 1 == last {
                sql.push_str(tail);
            }
            let insert =
                chunk.iter().fold(sqlx::query(&sql), |query, row| bind_log_row(query, row, &self.node, &self.host));
            insert.execute(tx.connection()).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl BatchDialect for SqliteDialect {
    type Tx = SqliteTx;

    const BACKEND: &'static str = super::BACKEND;

    async fn begin(&self) -> Result<Self::Tx, BoxError> {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).take();
        let connection = match idle {
            Some(connection) => connection,
            None => with_triggers(SqliteConnection::connect_with(&self.options).await?, &self.triggers).await?,
        };
        Ok(SqliteTx::new(connection))
    }

    async fn insert_job(&self, tx: &mut Self::Tx, job: &Job) -> Result<Result<(), StoreError>, BoxError> {
        self.write_job(tx, INSERT_JOB, job, StoreError::IdTaken).await
    }

    async fn insert_jobs(&self, tx: &mut Self::Tx, jobs: &[&Job]) -> Result<InsertOutcomes, BoxError> {
        if let [job] = jobs {
            return Ok(vec![self.insert_job(tx, job).await?]);
        }
        let mut outcomes = Vec::with_capacity(jobs.len());
        for chunk in jobs.chunks(JOBS_PER_STATEMENT) {
            match bulk::upsert(tx, chunk, Scope::Batch).await? {
                Upsert::Written => outcomes.extend(chunk.iter().map(|_| Ok(()))),
                Upsert::Refused => {
                    for job in chunk {
                        outcomes.push(self.insert_job(tx, job).await?);
                    }
                }
            }
        }
        Ok(outcomes)
    }

    async fn replace_job(&self, tx: &mut Self::Tx, job: &Job) -> Result<Result<(), StoreError>, BoxError> {
        self.write_job(tx, REPLACE_JOB, job, StoreError::NotFound).await
    }

    async fn change_state(&self, tx: &mut Self::Tx, change: &StateChange) -> Result<bool, BoxError> {
        let sql = tx.statement(CHANGE_STATE);
        let update = bind_change(sqlx::query(&sql), change).text(change.id.as_str());
        Ok(update.fetch_optional(tx.connection()).await?.is_some())
    }

    async fn change_states(&self, tx: &mut Self::Tx, changes: &[&StateChange]) -> Result<Vec<bool>, BoxError> {
        let mut applied = Vec::with_capacity(changes.len());
        for chunk in changes.chunks(CHANGES_PER_STATEMENT) {
            // One statement per chunk: the changes of one job collapse into the
            // one that decides its row (ready then reserved is one update).
            applied.extend(self.change_chunk(tx, chunk).await?);
        }
        Ok(applied)
    }

    async fn delete_all_live(&self, tx: &mut Self::Tx, at: Timestamp) -> Result<Vec<(JobId, u32)>, BoxError> {
        let sql = tx.statement(DELETE_ALL_LIVE);
        let rows: Vec<(String, i64)> = sqlx::query_as(&sql).bind(epoch_ms(at)).fetch_all(tx.connection()).await?;
        let deleted = rows.into_iter().map(|(id, attempt)| id_and_attempt(id, attempt)).collect::<Result<_, _>>()?;
        Ok(deleted)
    }

    async fn purge(&self, tx: &mut Self::Tx, of: &PurgeOf, limit: usize) -> Result<u64, BoxError> {
        let ids: Vec<String> = match of {
            PurgeOf::EndedBefore(ended_before) => {
                let sql = tx.statement(SELECT_EXPIRED);
                let select = sqlx::query_scalar(&sql).bind(epoch_ms(*ended_before)).bind(sql_count(limit));
                select.fetch_all(tx.connection()).await?
            }
            PurgeOf::DeadOf(topic) => {
                let select = sqlx::query_scalar(SELECT_DEAD).bind(topic.as_str()).bind(sql_count(limit));
                select.fetch_all(tx.connection()).await?
            }
            PurgeOf::DeadJob(id) => {
                let select = sqlx::query_scalar(SELECT_DEAD_JOB).bind(id.as_str()).bind(sql_count(limit));
                select.fetch_all(tx.connection()).await?
            }
        };
        if ids.is_empty() {
            return Ok(0);
        }
        let (history, jobs) = (in_list(DELETE_HISTORY_OF, ids.len()), in_list(DELETE_ENDED_JOBS, ids.len()));
        bind_texts(sqlx::query(&history), &ids).execute(tx.connection()).await?;
        // The triggers of job_ended_count take each deleted row off its count.
        let purged = bind_texts(sqlx::query(&jobs), &ids).execute(tx.connection()).await?.rows_affected();
        tx.connection().execute(DELETE_EMPTY_COUNTS).await?;
        Ok(purged)
    }

    async fn append_log(&self, tx: &mut Self::Tx, log: &[LogRow]) -> Result<(), BoxError> {
        self.write_log(tx, log, "").await
    }

    async fn commit(&self, mut tx: Self::Tx, log: &[LogRow]) -> Result<(), BoxError> {
        if tx.is_unbegun() {
            // No statement ran, so there is no transaction to end.
            self.put_back(tx.into_connection());
            return Ok(());
        }
        if log.is_empty() {
            tx.connection().execute("COMMIT").await?;
        } else {
            // The commit rides along with the last history rows: one round trip.
            self.write_log(&mut tx, log, "; COMMIT").await?;
        }
        self.put_back(tx.into_connection());
        Ok(())
    }

    fn logs_written_jobs(&self) -> bool {
        true
    }

    async fn insert_jobs_and_commit(&self, mut tx: Self::Tx, jobs: &[&Job]) -> Result<InsertOutcomes, BoxError> {
        // A batch of pushes that fits one statement is a transaction of its
        // own; should a job be refused, nothing is written and the batch
        // judges each job in a transaction as usual.
        if tx.is_unbegun() && jobs.len() <= JOBS_PER_STATEMENT {
            if let Upsert::Written = bulk::upsert(&mut tx, jobs, Scope::Own).await? {
                self.commit(tx, &[]).await?;
                return Ok(jobs.iter().map(|_| Ok(())).collect());
            }
        }
        let outcomes = self.insert_jobs(&mut tx, jobs).await?;
        self.commit(tx, &[]).await?;
        Ok(outcomes)
    }
}

/// The triggers that write the history line of every job the writer inserts,
/// or whose row it rewrites as a new push over an ended job or as a replace
/// (both set `create_time`), in the statement that writes the row: a batch of
/// pushes then needs no second statement for its history, and commits in the
/// round trip that inserts it. They are `TEMP`: they live on the writer's own
/// connection, with this node's name and host.
fn history_triggers(node: &str, host: &str) -> String {
    let line = format!(
        "INSERT INTO job_log (job_id, status, attempt, node, update_time, host) \
         VALUES (NEW.id, NEW.status, NEW.attempt, {}, NEW.update_time, {});",
        sql_text(node),
        sql_text(host)
    );
    format!(
        "CREATE TEMP TRIGGER IF NOT EXISTS job_inserted_log AFTER INSERT ON main.job BEGIN {line} END; \
         CREATE TEMP TRIGGER IF NOT EXISTS job_rewritten_log AFTER UPDATE OF create_time ON main.job BEGIN {line} END;"
    )
}

/// `connection` with the history `triggers` installed.
async fn with_triggers(mut connection: SqliteConnection, triggers: &str) -> Result<SqliteConnection, sqlx::Error> {
    connection.execute(triggers).await?;
    Ok(connection)
}

/// `text` as an SQL string literal.
fn sql_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
