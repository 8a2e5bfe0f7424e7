//! The SQLite statements of the group-commit writer.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use delayq_common::{Job, JobId, Timestamp};
use sqlx::error::ErrorKind;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, Executor, QueryBuilder, Sqlite, SqliteConnection};

use super::bulk;
use super::rows::{bind_job, epoch_ms, job_columns, live_states, number};
use crate::store::{BoxError, StateChange, StoreError};
use crate::writer::{collapse, moves_forward, BatchDialect, LogRow};

/// The conflict clause of a job insert, setting `status` to the given SQL
/// (a comma-separated list of string literals and macro calls): a push
/// rewrites every column of the row it finds with the same id.
macro_rules! overwrite_on_conflict {
    ($($status:tt)+) => {
        concat!(
            " ON CONFLICT (id) DO UPDATE SET \
             bizkey = excluded.bizkey, topic = excluded.topic, subtopic = excluded.subtopic, \
             delay = excluded.delay, create_time = excluded.create_time, body = excluded.body, \
             status = ",
            $($status)+,
            ", ttl = excluded.ttl, update_time = excluded.update_time, \
             run_at = excluded.run_at, ttr = excluded.ttr, priority = excluded.priority, \
             attempt = excluded.attempt, max_retries = excluded.max_retries, \
             retry_backoff = excluded.retry_backoff, result = excluded.result"
        )
    };
}

/// The conflict clause of a single job's insert: a row with the same id is
/// overwritten only when its job has ended; when a live job holds the id, no
/// row changes. The business-key index refuses a key held by another live job.
macro_rules! upsert_on_conflict {
    () => {
        concat!(overwrite_on_conflict!("excluded.status"), " WHERE job.status NOT IN ", live_states!())
    };
}

/// The conflict clause of a multi-row insert ([`super::bulk`]): as
/// [`upsert_on_conflict`], but a live job holding an id fails the whole
/// statement instead of leaving its row alone. Its status would become NULL,
/// which the column refuses; SQLite then rolls back just that statement. So a
/// statement that succeeds wrote every one of its rows, and says so without
/// returning one row per job.
pub(super) const BULK_UPSERT_CONFLICT_CLAUSE: &str =
    overwrite_on_conflict!("CASE WHEN job.status IN ", live_states!(), " THEN NULL ELSE excluded.status END");

/// Inserts one job, bound by [`bind_job`]; returns its id when it wrote a row.
///
/// This and the other single-row changes tell what they did by the row they
/// return, not by a count of changed rows: they may carry the batch's `BEGIN`
/// ([`SqliteTx::statement`]), and SQLite reports that statement with the count
/// of the change before it.
const INSERT_JOB: &str = concat!(
    "INSERT INTO job (",
    job_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    upsert_on_conflict!(),
    " RETURNING id"
);

/// Overwrites every column of a live job (bound like [`INSERT_JOB`]); returns its id when it did.
const REPLACE_JOB: &str = concat!(
    "UPDATE job SET bizkey = ?2, topic = ?3, subtopic = ?4, delay = ?5, create_time = ?6, \
     body = ?7, status = ?8, ttl = ?9, update_time = ?10, run_at = ?11, ttr = ?12, \
     priority = ?13, attempt = ?14, max_retries = ?15, retry_backoff = ?16, result = ?17 \
     WHERE id = ?1 AND status IN ",
    live_states!(),
    " RETURNING id"
);

/// The `SET` list of a state change: each column takes its new value when the
/// change moves the row forward ([`moves_forward`]), else keeps its own. `$row`
/// prefixes the row's columns ("" or "job."); the rest are the new values.
macro_rules! forward_assignments {
    ($row:literal, $status:literal, $attempt:literal, $run_at:literal, $update_time:literal, $result:literal) => {
        concat!(
            "status = ",
            forward_or_keep!($row, $status, $attempt, $status, "status"),
            ", attempt = ",
            forward_or_keep!($row, $status, $attempt, $attempt, "attempt"),
            ", run_at = ",
            forward_or_keep!($row, $status, $attempt, $run_at, "run_at"),
            ", update_time = ",
            forward_or_keep!($row, $status, $attempt, $update_time, "update_time"),
            ", result = ",
            forward_or_keep!($row, $status, $attempt, $result, "result")
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

/// Moves a live job forward; ended jobs never move, so a late journal entry cannot
/// revive one. A change that would take a live job back ([`moves_forward`]) leaves
/// its row as it is but still counts (its history line is written). SQLite reads
/// the old row in every `SET` expression, so each can test the same condition.
const CHANGE_STATE: &str = concat!(
    "UPDATE job SET ",
    forward_assignments!("", "?1", "?2", "?3", "?4", "?5"),
    " WHERE id = ?6 AND status IN ",
    live_states!(),
    " RETURNING id"
);

/// Moves many live jobs at once, after a `WITH v (...) AS (VALUES ...)` of the
/// changes; returns the ids of the live jobs it was given. Ended jobs never move
/// and live jobs only forward, as in [`CHANGE_STATE`].
const CHANGE_STATES_TAIL: &str = concat!(
    ") UPDATE job SET ",
    forward_assignments!("job.", "v.status", "v.attempt", "v.run_at", "v.update_time", "v.result"),
    " FROM v WHERE job.id = v.id AND job.status IN ",
    live_states!(),
    " RETURNING job.id"
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

    /// Turns a refused business key into [`StoreError::BizKeyTaken`] naming its holder.
    async fn biz_key_taken(&self, connection: &mut SqliteConnection, job: &Job) -> Result<StoreError, BoxError> {
        let biz_key = job.biz_key.clone().unwrap_or_default();
        let holder: Option<String> = sqlx::query_scalar(LIVE_HOLDER_OF_BIZ_KEY)
            .bind(job.topic.as_str())
            .bind(biz_key.as_str())
            .fetch_optional(&mut *connection)
            .await?;
        Ok(StoreError::BizKeyTaken { topic: job.topic.clone(), biz_key, id: holder.unwrap_or_default() })
    }
}

/// The writer's connection during a batch. `BEGIN IMMEDIATE` rides along with
/// the first statement of the batch instead of taking a round trip to the
/// connection's thread of its own.
pub(super) struct SqliteTx {
    connection: SqliteConnection,
    begin_pending: bool,
}

impl SqliteTx {
    /// `sql`, led by the pending `BEGIN` when it is the batch's first statement.
    /// The transaction counts as begun from here on: should the statement fail,
    /// either `BEGIN` ran (a constraint failure, which the batch may go past) or
    /// the batch fails and the connection is dropped.
    pub(super) fn statement<'s>(&mut self, sql: &'s str) -> Cow<'s, str> {
        if std::mem::take(&mut self.begin_pending) {
            // IMMEDIATE takes the write lock up front, so a second process on the
            // same file makes us wait (busy timeout) instead of failing mid-batch.
            Cow::Owned(format!("BEGIN IMMEDIATE; {sql}"))
        } else {
            Cow::Borrowed(sql)
        }
    }

    /// Whether no statement of the batch has run yet (nor `BEGIN`).
    pub(super) fn is_unbegun(&self) -> bool {
        self.begin_pending
    }

    /// The connection, for statements that run only after another one.
    pub(super) fn connection(&mut self) -> &mut SqliteConnection {
        &mut self.connection
    }
}

pub(super) fn is_unique_violation(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|database| database.is_unique_violation())
}

/// Whether a statement failed on a NOT NULL column (see [`BULK_UPSERT_CONFLICT_CLAUSE`]).
pub(super) fn is_not_null_violation(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|database| matches!(database.kind(), ErrorKind::NotNullViolation))
}

#[async_trait]
impl BatchDialect for SqliteDialect {
    type Tx = SqliteTx;

    fn backend(&self) -> &'static str {
        super::BACKEND
    }

    async fn begin(&self) -> Result<Self::Tx, BoxError> {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).take();
        let connection = match idle {
            Some(connection) => connection,
            None => with_triggers(SqliteConnection::connect_with(&self.options).await?, &self.triggers).await?,
        };
        Ok(SqliteTx { connection, begin_pending: true })
    }

    async fn insert_job(&self, tx: &mut Self::Tx, job: &Job) -> Result<Result<(), StoreError>, BoxError> {
        let sql = tx.statement(INSERT_JOB);
        match bind_job(sqlx::query(&sql), job).fetch_optional(tx.connection()).await {
            Ok(None) => Ok(Err(StoreError::IdTaken(job.id.clone()))),
            Ok(Some(_)) => Ok(Ok(())),
            Err(error) if is_unique_violation(&error) => Ok(Err(self.biz_key_taken(tx.connection(), job).await?)),
            Err(error) => Err(error.into()),
        }
    }

    async fn insert_jobs(&self, tx: &mut Self::Tx, jobs: &[&Job]) -> Result<Vec<Result<(), StoreError>>, BoxError> {
        match jobs {
            [job] => Ok(vec![self.insert_job(tx, job).await?]),
            _ => bulk::insert_jobs(self, tx, jobs).await,
        }
    }

    async fn replace_job(&self, tx: &mut Self::Tx, job: &Job) -> Result<Result<(), StoreError>, BoxError> {
        let sql = tx.statement(REPLACE_JOB);
        match bind_job(sqlx::query(&sql), job).fetch_optional(tx.connection()).await {
            Ok(None) => Ok(Err(StoreError::NotFound(job.id.clone()))),
            Ok(Some(_)) => Ok(Ok(())),
            Err(error) if is_unique_violation(&error) => Ok(Err(self.biz_key_taken(tx.connection(), job).await?)),
            Err(error) => Err(error.into()),
        }
    }

    async fn change_state(&self, tx: &mut Self::Tx, change: &StateChange) -> Result<bool, BoxError> {
        let sql = tx.statement(CHANGE_STATE);
        let changed = sqlx::query(&sql)
            .bind(change.state.as_str())
            .bind(i64::from(change.attempt))
            .bind(epoch_ms(change.run_at))
            .bind(epoch_ms(change.at))
            .bind(change.result.as_deref())
            .bind(change.id.as_str())
            .fetch_optional(tx.connection())
            .await?;
        Ok(changed.is_some())
    }

    async fn change_states(&self, tx: &mut Self::Tx, changes: &[&StateChange]) -> Result<Vec<bool>, BoxError> {
        let mut applied = Vec::with_capacity(changes.len());
        for chunk in changes.chunks(CHANGES_PER_STATEMENT) {
            // One statement per chunk: the changes of one job collapse into the
            // one that decides its row (ready then reserved is one update).
            let (decisive, slots) = collapse(chunk);
            let changed: HashSet<String> = if let [change] = decisive.as_slice() {
                let changed = self.change_state(tx, change).await?;
                changed.then(|| change.id.to_string()).into_iter().collect()
            } else {
                let mut update = QueryBuilder::<Sqlite>::new(
                    tx.statement("WITH v (id, status, attempt, run_at, update_time, result) AS ("),
                );
                update.push_values(&decisive, |mut values, change| {
                    values
                        .push_bind(change.id.as_str())
                        .push_bind(change.state.as_str())
                        .push_bind(i64::from(change.attempt))
                        .push_bind(epoch_ms(change.run_at))
                        .push_bind(epoch_ms(change.at))
                        .push_bind(change.result.as_deref());
                });
                update.push(CHANGE_STATES_TAIL);
                let changed: Vec<String> = update.build_query_scalar().fetch_all(tx.connection()).await?;
                changed.into_iter().collect()
            };
            applied.extend(slots.into_iter().map(|slot| {
                slot.and_then(|index| decisive.get(index)).is_some_and(|change| changed.contains(change.id.as_str()))
            }));
        }
        Ok(applied)
    }

    async fn delete_all_live(&self, tx: &mut Self::Tx, at: Timestamp) -> Result<Vec<(JobId, u32)>, BoxError> {
        let sql = tx.statement(DELETE_ALL_LIVE);
        let rows: Vec<(String, i64)> = sqlx::query_as(&sql).bind(epoch_ms(at)).fetch_all(tx.connection()).await?;
        let mut deleted = Vec::with_capacity(rows.len());
        for (id, attempt) in rows {
            let id = JobId::parse(id).map_err(|error| StoreError::Corrupt(format!("id: {error}")))?;
            deleted.push((id, number("attempt", attempt)?));
        }
        Ok(deleted)
    }

    async fn purge_ended(&self, tx: &mut Self::Tx, ended_before: Timestamp, limit: usize) -> Result<u64, BoxError> {
        let sql = tx.statement(SELECT_EXPIRED);
        let ids: Vec<String> = sqlx::query_scalar(&sql)
            .bind(epoch_ms(ended_before))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(tx.connection())
            .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        let mut history = QueryBuilder::<Sqlite>::new("DELETE FROM job_log WHERE job_id IN (");
        push_id_list(&mut history, &ids);
        history.build().execute(tx.connection()).await?;
        // The triggers of job_ended_count take each deleted row off its count.
        let mut jobs = QueryBuilder::<Sqlite>::new(concat!("DELETE FROM job WHERE status NOT IN ", live_states!()));
        jobs.push(" AND id IN (");
        push_id_list(&mut jobs, &ids);
        let purged = jobs.build().execute(tx.connection()).await?.rows_affected();
        tx.connection().execute(DELETE_EMPTY_COUNTS).await?;
        Ok(purged)
    }

    async fn append_log(&self, tx: &mut Self::Tx, log: &[LogRow]) -> Result<(), BoxError> {
        self.write_log(tx, log, "").await
    }

    async fn commit(&self, mut tx: Self::Tx, log: &[LogRow]) -> Result<(), BoxError> {
        if tx.begin_pending {
            // No statement ran, so there is no transaction to end.
            self.put_back(tx.connection);
            return Ok(());
        }
        if log.is_empty() {
            tx.connection().execute("COMMIT").await?;
        } else {
            // The commit rides along with the last history rows: one round trip.
            self.write_log(&mut tx, log, "; COMMIT").await?;
        }
        self.put_back(tx.connection);
        Ok(())
    }

    fn logs_written_jobs(&self) -> bool {
        true
    }

    async fn insert_jobs_and_commit(
        &self,
        mut tx: Self::Tx,
        jobs: &[&Job],
    ) -> Result<Vec<Result<(), StoreError>>, BoxError> {
        if let Some(outcomes) = bulk::insert_jobs_and_commit(&mut tx, jobs).await? {
            self.put_back(tx.connection);
            return Ok(outcomes);
        }
        let outcomes = self.insert_jobs(&mut tx, jobs).await?;
        self.commit(tx, &[]).await?;
        Ok(outcomes)
    }
}

impl SqliteDialect {
    /// Appends `log` in multi-row inserts, the last one followed by `tail`.
    async fn write_log(&self, tx: &mut SqliteTx, log: &[LogRow], tail: &str) -> Result<(), BoxError> {
        let chunks = log.chunks(LOG_ROWS_PER_STATEMENT);
        let last = chunks.len();
        for (index, chunk) in chunks.enumerate() {
            let mut insert = QueryBuilder::<Sqlite>::new(
                tx.statement("INSERT INTO job_log (job_id, status, attempt, node, update_time, host) "),
            );
            insert.push_values(chunk, |mut values, row| {
                values
                    .push_bind(row.job_id.as_str())
                    .push_bind(row.state.as_str())
                    .push_bind(i64::from(row.attempt))
                    .push_bind(self.node.as_str())
                    .push_bind(epoch_ms(row.at))
                    .push_bind(self.host.as_str());
            });
            if index + 1 == last {
                insert.push(tail);
            }
            insert.build().execute(tx.connection()).await?;
        }
        Ok(())
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

/// Appends `ids` as bound values and the closing parenthesis of an `IN (` list.
fn push_id_list<'q>(query: &mut QueryBuilder<'q, Sqlite>, ids: &'q [String]) {
    let mut values = query.separated(", ");
    for id in ids {
        values.push_bind(id.as_str());
    }
    values.push_unseparated(")");
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
