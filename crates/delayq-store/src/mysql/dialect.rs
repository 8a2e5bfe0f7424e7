//! The MySQL statements of the group-commit writer.
//!
//! Inserts go out as multi-row `INSERT`s of a few fixed sizes (so each size is
//! one cached prepared statement). A duplicate key in a multi-row insert makes
//! InnoDB roll back that statement only, never the transaction, so the chunk is
//! then replayed row by row to judge each job alone.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use delayq_common::{Job, JobId, JobState, Timestamp};
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlQueryResult};
use sqlx::Executor;

use super::chunks::{apply_changes, chunk_level, fixed_chunks, lock_live, statement, CHUNK_SIZES};
use super::connection::{within, WriterConnection};
use super::counts::MysqlTx;
use super::rows::{job_assignments, job_wire_size};
use crate::sql::binds::{
    bind_change, bind_job, bind_job_assignments, bind_log_row, bind_texts, in_list, multi_row_values, Bind,
    DELETE_HISTORY_OF, INSERT_JOB_ROWS, INSERT_LOG_ROWS, LOG_COLUMN_COUNT,
};
use crate::sql::is_unique_violation;
use crate::sql::rows::{biz_key_taken, epoch_ms, id_and_attempt, sql_count, state, Text, JOB_COLUMN_COUNT};
use crate::store::{BoxError, StateChange, StoreError};
use crate::writer::{collapse, moves_forward, moves_forward_from, BatchDialect, InsertOutcomes, LogRow, PurgeOf};

/// The most bytes of values one multi-row insert carries (at most half the
/// server's `max_allowed_packet`, which is 16 MiB by default on MariaDB).
const MAX_STATEMENT_BYTES: usize = 4 << 20;
/// Room left in a packet for everything but a job's values.
const PACKET_OVERHEAD_BYTES: usize = 4096;
/// The longest `node` or `host` a `job_log` row holds (VARCHAR(255)).
const MAX_LOG_NAME_CHARS: usize = 255;

/// InnoDB chose this transaction as a deadlock victim and rolled it back.
const ER_LOCK_DEADLOCK: u16 = 1213;
/// A row lock was not granted within `innodb_lock_wait_timeout`.
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// Errors that concern the values of one row (too long for its column, not
/// valid text, out of range): they refuse that job, not the batch.
const ROW_VALUE_ERRORS: [u16; 3] = [1406, 1366, 1264];

/// Overwrites every column of a live job (a `replace` push).
const REPLACE_LIVE_JOB: &str = concat!("UPDATE job SET ", job_assignments!(), " WHERE id = ? AND is_live = 1");
/// Overwrites every column of an ended job whose id is pushed again.
const OVERWRITE_ENDED_JOB: &str = concat!("UPDATE job SET ", job_assignments!(), " WHERE id = ? AND is_live = 0");

/// Moves a live job forward; ended jobs never move, so a late journal entry cannot
/// revive one, and a live job never goes back ([`moves_forward`]). Binds: status,
/// attempt, run_at, update_time, result, id, then status, attempt, attempt, status.
/// (MariaDB assigns `SET` columns left to right, each seeing the ones before, so
/// the condition cannot go into the `SET` expressions as in SQLite.)
const CHANGE_STATE: &str = concat!(
    "UPDATE job SET status = ?, attempt = ?, run_at = ?, update_time = ?, result = ? \
     WHERE id = ? AND is_live = 1 AND ",
    moves_forward!("status", "attempt", "?", "?")
);

const IS_LIVE: &str = "SELECT is_live FROM job WHERE id = ?";
const SELECT_LIVE_FOR_UPDATE: &str = "SELECT id, attempt, topic FROM job WHERE is_live = 1 ORDER BY id FOR UPDATE";
/// The ended row an insert is about to overwrite, for the ended counts.
const SELECT_ENDED_FOR_UPDATE: &str = "SELECT topic, status FROM job WHERE id = ? AND is_live = 0 FOR UPDATE";
/// The ended jobs to purge, oldest end first (`job_ended_update_time_idx`).
const SELECT_EXPIRED_FOR_UPDATE: &str =
    "SELECT id, topic, status FROM job WHERE is_live = 0 AND update_time < ? ORDER BY update_time LIMIT ? FOR UPDATE";
/// The dead jobs of a topic to purge (`job_topic_status_id_idx`).
const SELECT_DEAD_FOR_UPDATE: &str =
    "SELECT id, topic, status FROM job WHERE topic = ? AND status = 'dead' ORDER BY id LIMIT ? FOR UPDATE";
/// One job to purge if it is dead (the primary key).
const SELECT_DEAD_JOB_FOR_UPDATE: &str =
    "SELECT id, topic, status FROM job WHERE id = ? AND status = 'dead' LIMIT ? FOR UPDATE";
/// Counts that fell to 0 once their jobs were purged or pushed again.
const DELETE_EMPTY_COUNTS: &str = "DELETE FROM job_ended_count WHERE jobs <= 0";
/// The ended jobs among the ids that follow (`?, ?, …)`).
const DELETE_ENDED_JOBS: &str = "DELETE FROM job WHERE is_live = 0 AND id IN (";
const DELETE_ALL_LIVE: &str = "UPDATE job SET status = 'deleted', update_time = ? WHERE is_live = 1";
const LIVE_HOLDER_OF_BIZ_KEY: &str = "SELECT id FROM job WHERE topic = ? AND live_bizkey = ?";
const ID_EXISTS: &str = "SELECT COUNT(*) FROM job WHERE id = ?";

/// The MySQL side of the writer: its connection and who writes.
pub(super) struct MysqlDialect {
    connection: WriterConnection,
    node: String,
    host: String,
    /// The server's `max_allowed_packet`: a larger statement breaks the connection.
    max_packet_bytes: usize,
    /// `INSERT INTO job` with `CHUNK_SIZES[i]` rows.
    insert_jobs_sql: Vec<String>,
    /// `INSERT INTO job_log` with `CHUNK_SIZES[i]` rows.
    insert_log_sql: Vec<String>,
    /// [`LOCK_LIVE_HEAD`] with `CHUNK_SIZES[i]` ids.
    lock_live_sql: Vec<String>,
    /// [`APPLY_CHANGES_HEAD`] with `CHUNK_SIZES[i]` changes.
    apply_changes_sql: Vec<String>,
}

impl MysqlDialect {
    pub(super) fn new(
        connection: WriterConnection,
        node: String,
        host: String,
        max_packet_bytes: usize,
    ) -> MysqlDialect {
        let sizes = |statement: fn(usize) -> String| CHUNK_SIZES.iter().map(|&rows| statement(rows)).collect();
        MysqlDialect {
            connection,
            node: truncate_chars(node, MAX_LOG_NAME_CHARS),
            host: truncate_chars(host, MAX_LOG_NAME_CHARS),
            max_packet_bytes,
            insert_jobs_sql: sizes(|rows| multi_row_values(INSERT_JOB_ROWS, JOB_COLUMN_COUNT, rows)),
            insert_log_sql: sizes(|rows| multi_row_values(INSERT_LOG_ROWS, LOG_COLUMN_COUNT, rows)),
            lock_live_sql: sizes(lock_live),
            apply_changes_sql: sizes(apply_changes),
        }
    }

    /// Inserts `jobs` in order, each judged alone, in as few statements as it can.
    async fn insert_batch(&self, tx: &mut MysqlTx, jobs: &[&Job]) -> Result<InsertOutcomes, BoxError> {
        let mut outcomes = Vec::with_capacity(jobs.len());
        let mut rest = jobs;
        while !rest.is_empty() {
            let (level, rows) = chunk_level(rest, MAX_STATEMENT_BYTES.min(self.max_packet_bytes / 2));
            let (chunk, after) = rest.split_at(rows);
            rest = after;
            if rows > 1 {
                let mut insert = sqlx::query(statement(&self.insert_jobs_sql, level)?);
                for job in chunk {
                    insert = bind_job(insert, job);
                }
                match within(insert.execute(&mut tx.connection)).await {
                    Ok(_) => {
                        for job in chunk {
                            tx.count(job.topic.as_str(), job.state, 1);
                        }
                        outcomes.extend(chunk.iter().map(|_| Ok(())));
                        continue;
                    }
                    // Only this statement was rolled back: judge its rows one by one.
                    Err(error) if is_unique_violation(&error) || is_row_value_error(&error) => {}
                    Err(error) => return Err(error.into()),
                }
            }
            for job in chunk {
                outcomes.push(self.insert_one(tx, job).await?);
            }
        }
        Ok(outcomes)
    }

    /// Inserts one job; on a duplicate key, overwrites a terminal row with its id
    /// or names the refusal.
    async fn insert_one(&self, tx: &mut MysqlTx, job: &Job) -> Result<Result<(), StoreError>, BoxError> {
        if let Err(too_large) = self.check_fits_packet(job) {
            return Ok(Err(too_large));
        }
        let insert = bind_job(sqlx::query(statement(&self.insert_jobs_sql, CHUNK_SIZES.len() - 1)?), job);
        match within(insert.execute(&mut tx.connection)).await {
            Ok(_) => {
                tx.count(job.topic.as_str(), job.state, 1);
                return Ok(Ok(()));
            }
            Err(error) if is_unique_violation(&error) => {}
            Err(error) if is_row_value_error(&error) => return Ok(Err(row_refused(error))),
            Err(error) => return Err(error.into()),
        }
        // The ended row about to be overwritten leaves its count: look up the
        // batch's ended jobs first, this one may be among them.
        tx.resolve_ended().await?;
        let ended: Option<(Text, Text)> =
            within(sqlx::query_as(SELECT_ENDED_FOR_UPDATE).bind(job.id.as_str()).fetch_optional(&mut tx.connection))
                .await?;
        match self.update_job(&mut tx.connection, job, false).await {
            Ok(done) if done.rows_affected() > 0 => {
                if let Some((Text(topic), Text(status))) = ended {
                    tx.count(&topic, state(&status)?, -1);
                }
                tx.count(job.topic.as_str(), job.state, 1);
                Ok(Ok(()))
            }
            Ok(_) => {
                let rows_with_id: i64 =
                    within(sqlx::query_scalar(ID_EXISTS).bind(job.id.as_str()).fetch_one(&mut tx.connection)).await?;
                if rows_with_id > 0 {
                    Ok(Err(StoreError::IdTaken(job.id.clone())))
                } else {
                    Ok(Err(self.biz_key_taken(&mut tx.connection, job).await?))
                }
            }
            Err(error) if is_unique_violation(&error) => Ok(Err(self.biz_key_taken(&mut tx.connection, job).await?)),
            Err(error) => Err(error.into()),
        }
    }

    /// Refuses a job whose statement the server would not take (a larger
    /// packet would fail the connection and with it the whole batch).
    fn check_fits_packet(&self, job: &Job) -> Result<(), StoreError> {
        let bytes = job_wire_size(job);
        if bytes + PACKET_OVERHEAD_BYTES <= self.max_packet_bytes {
            return Ok(());
        }
        let reason = format!("a job of {bytes} bytes exceeds max_allowed_packet ({})", self.max_packet_bytes);
        Err(StoreError::Unavailable { backend: super::BACKEND, source: reason.into() })
    }

    /// Overwrites every column of the row of `job.id` if its liveness is `live`.
    async fn update_job(
        &self,
        tx: &mut MySqlConnection,
        job: &Job,
        live: bool,
    ) -> Result<MySqlQueryResult, sqlx::Error> {
        let sql = if live { REPLACE_LIVE_JOB } else { OVERWRITE_ENDED_JOB };
        let update = bind_job_assignments(sqlx::query(sql), job).text(job.id.as_str());
        within(update.execute(&mut *tx)).await
    }

    /// Turns a refused business key into [`StoreError::BizKeyTaken`] naming its holder.
    async fn biz_key_taken(&self, tx: &mut MySqlConnection, job: &Job) -> Result<StoreError, BoxError> {
        let holder = sqlx::query_scalar(LIVE_HOLDER_OF_BIZ_KEY)
            .bind(job.topic.as_str())
            .bind(job.biz_key.as_deref().unwrap_or_default());
        Ok(biz_key_taken(job, within(holder.fetch_optional(&mut *tx)).await?))
    }
}

#[async_trait]
impl BatchDialect for MysqlDialect {
    /// The writer's connection; its session has no autocommit, so the batch's
    /// statements are one transaction until `commit`.
    type Tx = MysqlTx;

    const BACKEND: &'static str = super::BACKEND;

    async fn begin(&self) -> Result<Self::Tx, BoxError> {
        Ok(MysqlTx::new(self.connection.take().await?))
    }

    async fn insert_job(&self, tx: &mut Self::Tx, job: &Job) -> Result<Result<(), StoreError>, BoxError> {
        self.insert_one(tx, job).await
    }

    async fn insert_jobs(&self, tx: &mut Self::Tx, jobs: &[&Job]) -> Result<InsertOutcomes, BoxError> {
        self.insert_batch(tx, jobs).await
    }

    async fn replace_job(&self, tx: &mut Self::Tx, job: &Job) -> Result<Result<(), StoreError>, BoxError> {
        if let Err(too_large) = self.check_fits_packet(job) {
            return Ok(Err(too_large));
        }
        match self.update_job(&mut tx.connection, job, true).await {
            Ok(done) if done.rows_affected() == 0 => Ok(Err(StoreError::NotFound(job.id.clone()))),
            Ok(_) => {
                tx.count(job.topic.as_str(), job.state, 1);
                Ok(Ok(()))
            }
            Err(error) if is_unique_violation(&error) => Ok(Err(self.biz_key_taken(&mut tx.connection, job).await?)),
            Err(error) if is_row_value_error(&error) => Ok(Err(row_refused(error))),
            Err(error) => Err(error.into()),
        }
    }

    async fn change_state(&self, tx: &mut Self::Tx, change: &StateChange) -> Result<bool, BoxError> {
        // The connection reports matched rows (CLIENT_FOUND_ROWS), so a change
        // that rewrites identical values still counts, as in SQLite.
        let update = bind_change(sqlx::query(CHANGE_STATE), change)
            .text(change.id.as_str())
            .text(change.state.as_str())
            .integer(i64::from(change.attempt))
            .integer(i64::from(change.attempt))
            .text(change.state.as_str());
        let done = within(update.execute(&mut tx.connection)).await?;
        if done.rows_affected() > 0 {
            // The row was live (the update requires it), so the job ends here.
            if !change.state.is_live() {
                tx.ended(&change.id, change.state);
            }
            return Ok(true);
        }
        // Not moved: a live job it would have taken back still counts (its
        // history line is written); an unknown or ended job does not.
        let live: Option<i8> =
            within(sqlx::query_scalar(IS_LIVE).bind(change.id.as_str()).fetch_optional(&mut tx.connection)).await?;
        Ok(live == Some(1))
    }

    async fn change_states(&self, tx: &mut Self::Tx, changes: &[&StateChange]) -> Result<Vec<bool>, BoxError> {
        // The changes of one job collapse into the one that decides its row;
        // the rest go out as multi-row statements of the fixed chunk sizes,
        // two round trips per chunk instead of one or two per change.
        let collapsed = collapse(changes);
        let mut live: HashSet<&str> = HashSet::with_capacity(collapsed.decisive.len());
        for (level, chunk) in fixed_chunks(&collapsed.decisive) {
            if let [change] = chunk {
                if self.change_state(tx, change).await? {
                    live.insert(change.id.as_str());
                }
                continue;
            }
            // MariaDB has no UPDATE … RETURNING: lock the rows and read where
            // each live one stands, then write the changes that move one forward.
            let mut lock = sqlx::query_as(statement(&self.lock_live_sql, level)?);
            for change in chunk {
                lock = lock.bind(change.id.as_str());
            }
            let rows: Vec<(Text, Text, Text, i64, i8)> = within(lock.fetch_all(&mut tx.connection)).await?;
            let mut locked: HashMap<String, (String, JobState, i64)> = HashMap::with_capacity(rows.len());
            for (Text(id), Text(topic), Text(status), attempt, is_live) in rows {
                if is_live == 1 {
                    locked.insert(id, (topic, state(&status)?, attempt));
                }
            }
            let mut moving: Vec<&StateChange> = Vec::with_capacity(chunk.len());
            for &change in chunk {
                let Some((topic, row_state, row_attempt)) = locked.get(change.id.as_str()) else { continue };
                live.insert(change.id.as_str());
                if moves_forward_from(*row_state, *row_attempt, change) {
                    moving.push(change);
                    // An ending change always applies to a live row.
                    if !change.state.is_live() {
                        tx.count(topic, change.state, 1);
                    }
                }
            }
            for (level, part) in fixed_chunks(&moving) {
                let mut apply = sqlx::query(statement(&self.apply_changes_sql, level)?);
                for change in part {
                    apply = bind_change(apply.text(change.id.as_str()), change);
                }
                within(apply.execute(&mut tx.connection)).await?;
            }
        }
        Ok(collapsed.applied(|id| live.contains(id)))
    }

    async fn delete_all_live(&self, tx: &mut Self::Tx, at: Timestamp) -> Result<Vec<(JobId, u32)>, BoxError> {
        // MariaDB has no UPDATE … RETURNING: lock the live rows, read them, then move them.
        let rows: Vec<(Text, i64, Text)> =
            within(sqlx::query_as(SELECT_LIVE_FOR_UPDATE).fetch_all(&mut tx.connection)).await?;
        within(sqlx::query(DELETE_ALL_LIVE).bind(epoch_ms(at)).execute(&mut tx.connection)).await?;
        let mut deleted = Vec::with_capacity(rows.len());
        for (Text(id), attempt, Text(topic)) in rows {
            tx.count(&topic, JobState::Deleted, 1);
            deleted.push(id_and_attempt(id, attempt)?);
        }
        Ok(deleted)
    }

    async fn append_log(&self, tx: &mut Self::Tx, log: &[LogRow]) -> Result<(), BoxError> {
        for (level, chunk) in fixed_chunks(log) {
            let mut insert = sqlx::query(statement(&self.insert_log_sql, level)?);
            for row in chunk {
                insert = bind_log_row(insert, row, &self.node, &self.host);
            }
            within(insert.execute(&mut tx.connection)).await?;
        }
        Ok(())
    }

    async fn purge(&self, tx: &mut Self::Tx, of: &PurgeOf, limit: usize) -> Result<u64, BoxError> {
        // A job this batch ended is counted before its row can go.
        tx.resolve_ended().await?;
        let select = match of {
            PurgeOf::EndedBefore(ended_before) => {
                sqlx::query_as(SELECT_EXPIRED_FOR_UPDATE).bind(epoch_ms(*ended_before))
            }
            PurgeOf::DeadOf(topic) => sqlx::query_as(SELECT_DEAD_FOR_UPDATE).bind(topic.as_str()),
            PurgeOf::DeadJob(id) => sqlx::query_as(SELECT_DEAD_JOB_FOR_UPDATE).bind(id.as_str()),
        };
        let expired: Vec<(Text, Text, Text)> =
            within(select.bind(sql_count(limit)).fetch_all(&mut tx.connection)).await?;
        if expired.is_empty() {
            return Ok(0);
        }
        let ids: Vec<&str> = expired.iter().map(|(Text(id), _, _)| id.as_str()).collect();
        let (history, jobs) = (in_list(DELETE_HISTORY_OF, ids.len()), in_list(DELETE_ENDED_JOBS, ids.len()));
        within(bind_texts(sqlx::query(&history), &ids).execute(&mut tx.connection)).await?;
        let purged = within(bind_texts(sqlx::query(&jobs), &ids).execute(&mut tx.connection)).await?.rows_affected();
        for (_, Text(topic), Text(status)) in &expired {
            tx.count(topic, state(status)?, -1);
        }
        within(sqlx::query(DELETE_EMPTY_COUNTS).execute(&mut tx.connection)).await?;
        Ok(purged)
    }

    async fn commit(&self, mut tx: Self::Tx, log: &[LogRow]) -> Result<(), BoxError> {
        self.append_log(&mut tx, log).await?;
        tx.write_counts().await?;
        within(tx.connection.execute("COMMIT")).await?;
        self.connection.put_back(tx.connection);
        Ok(())
    }

    fn is_retryable(&self, error: &BoxError) -> bool {
        is_lock_conflict(error)
    }
}

fn truncate_chars(text: String, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text,
    }
}

fn mysql_error_number(error: &sqlx::Error) -> Option<u16> {
    let database = error.as_database_error()?;
    database.try_downcast_ref::<MySqlDatabaseError>().map(MySqlDatabaseError::number)
}

fn is_row_value_error(error: &sqlx::Error) -> bool {
    mysql_error_number(error).is_some_and(|number| ROW_VALUE_ERRORS.contains(&number))
}

/// The refusal of one job whose values the server would not store.
fn row_refused(error: sqlx::Error) -> StoreError {
    StoreError::Unavailable { backend: super::BACKEND, source: error.into() }
}

/// Returns whether a failed batch may simply be run again: InnoDB rolled it
/// back because of another transaction's locks (another delayq node).
fn is_lock_conflict(error: &BoxError) -> bool {
    let number = error.downcast_ref::<sqlx::Error>().and_then(mysql_error_number);
    matches!(number, Some(ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_at_a_char_boundary() {
        assert_eq!(truncate_chars("ünï".into(), 2), "ün");
        assert_eq!(truncate_chars("node".into(), 255), "node");
    }
}
