//! The MySQL / MariaDB backend: the durable store of the distributed deployment.
//!
//! Writes go through the group-commit writer ([`crate::writer`]) on one
//! connection of its own, so concurrent writes of this process share one
//! InnoDB transaction; a write is answered once its transaction has committed.
//! Reads use a pool. Several delayq nodes may share one database: InnoDB
//! row locks order their writers, and a batch that loses a deadlock is run again.
//!
//! When the server is down, a write fails within about [`ACQUIRE_TIMEOUT`]
//! with [`StoreError::Unavailable`] (a statement already sent to a server that
//! stopped answering gives up after 10 s); the store reconnects by itself once
//! the server is back.
//!
//! Retention and counts: ended jobs past the retention are purged in batches by
//! a task of the store ([`crate::retention`]); `/stats` counts live jobs from
//! the index `job_live_idx` and reads ended counts from `job_ended_count`,
//! which the writer keeps (`counts`).
//!
//! Layout: `rows` maps rows to jobs, `dialect` holds the write statements,
//! `chunks` the sizes and text of its multi-row statements,
//! `counts` the writer's transaction and the ended counts,
//! `connection` the connections and statement deadlines, `scratch` (feature
//! `testsuite`) throwaway databases for tests.

mod chunks;
mod connection;
mod counts;
mod dialect;
mod rows;

use std::str::FromStr;

use async_trait::async_trait;
use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use sqlx::migrate::Migrator;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::MySqlPool;

pub use self::connection::ACQUIRE_TIMEOUT;
use self::connection::{pool_options, within, WriterConnection};
use self::dialect::MysqlDialect;
use self::rows::{into_jobs, job_columns, number, sql_count, state, JobRow, LogEntryRow, Text};
use crate::identity::{StoreId, STORE_ID_KEY};
use crate::options::StoreOptions;
use crate::retention::RetentionTask;
use crate::store::{JobStore, ListCursor, LogEntry, StateChange, StateCount, StoreError};
use crate::writer::{host_name, GroupCommitWriter};

const BACKEND: &str = "mysql";
const READ_CONNECTIONS: u32 = 8;

static MIGRATOR: Migrator = sqlx::migrate!("../../sql/mysql");

/// The job store over one MySQL or MariaDB database.
pub struct MysqlStore {
    store_id: StoreId,
    reader: MySqlPool,
    writer: GroupCommitWriter,
    retention: Option<RetentionTask>,
    /// The database of [`MysqlStore::open_scratch`], dropped by `close`.
    #[cfg(feature = "testsuite")]
    scratch: Option<scratch::ScratchDatabase>,
}

impl MysqlStore {
    /// Connects to the database of a `mysql://user:password@host:port/database`
    /// URL and applies the migrations of `sql/mysql`. `node` names this process
    /// in `job_log`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the URL is invalid or the database
    /// cannot be reached or migrated.
    pub async fn open(url: &str, node: String) -> Result<MysqlStore, StoreError> {
        MysqlStore::open_with_options(url, node, StoreOptions::default()).await
    }

    /// Connects as [`MysqlStore::open`] does, with retention and a journal bound.
    ///
    /// # Errors
    /// As [`MysqlStore::open`].
    pub async fn open_with_options(
        url: &str,
        node: String,
        store_options: StoreOptions,
    ) -> Result<MysqlStore, StoreError> {
        let options = MySqlConnectOptions::from_str(url).map_err(unavailable)?;
        MysqlStore::connect(options, node, store_options).await
    }

    /// Returns how many transactions the writer has committed (each may carry
    /// the writes of many callers).
    pub fn commits(&self) -> u64 {
        self.writer.commits()
    }

    async fn connect(
        options: MySqlConnectOptions,
        node: String,
        store_options: StoreOptions,
    ) -> Result<MysqlStore, StoreError> {
        let reader = pool_options(READ_CONNECTIONS).connect_with(options.clone()).await.map_err(unavailable)?;
        migrate(&reader).await?;
        let store_id = shared_store_id(&reader).await?;
        let max_packet_bytes: i64 =
            within(sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)").fetch_one(&reader))
                .await
                .map_err(unavailable)?;
        let max_packet_bytes = usize::try_from(max_packet_bytes).unwrap_or(usize::MAX);
        let dialect = MysqlDialect::new(
            WriterConnection::new(options.statement_cache_capacity(chunks::WRITER_STATEMENT_CACHE)),
            node,
            host_name(),
            max_packet_bytes,
        );
        let writer = GroupCommitWriter::spawn(dialect, store_options.journal_max);
        let retention = RetentionTask::spawn(writer.clone(), store_options.retention, store_options.purge_interval);
        Ok(MysqlStore {
            store_id,
            reader,
            writer,
            retention,
            #[cfg(feature = "testsuite")]
            scratch: None,
        })
    }
}

/// How long a node waits for another node's migrations before giving up.
const MIGRATION_LOCK_WAIT_SECS: i64 = 60;

/// Applies the migrations under a named lock of the database, so nodes that
/// start together on an empty database do not apply them twice. (sqlx's own
/// lock asks MariaDB for `GET_LOCK(name, -1)`, which MariaDB answers with NULL
/// instead of waiting, so it does not serialize anything there.)
async fn migrate(pool: &MySqlPool) -> Result<(), StoreError> {
    let mut connection = pool.acquire().await.map_err(unavailable)?;
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(CONCAT('delayq-migrations:', DATABASE()), ?)")
        .bind(MIGRATION_LOCK_WAIT_SECS)
        .fetch_one(&mut *connection)
        .await
        .map_err(unavailable)?;
    if locked != Some(1) {
        return Err(unavailable(std::io::Error::other(format!(
            "another node held the migration lock for over {MIGRATION_LOCK_WAIT_SECS} s"
        ))));
    }
    let migrated = MIGRATOR.run_direct(&mut *connection).await;
    let released =
        sqlx::query("SELECT RELEASE_LOCK(CONCAT('delayq-migrations:', DATABASE()))").execute(&mut *connection).await;
    migrated.map_err(unavailable)?;
    if released.is_err() {
        // The lock ends with the connection anyway; do not keep it in the pool.
        connection.detach();
    }
    Ok(())
}

/// Records a new store id unless the database holds one, and returns the one
/// it holds: nodes opening the database at once all read the first writer's.
async fn shared_store_id(pool: &MySqlPool) -> Result<StoreId, StoreError> {
    let generated = StoreId::generate();
    let insert = sqlx::query(INSERT_STORE_ID).bind(STORE_ID_KEY).bind(generated.as_str());
    within(insert.execute(pool)).await.map_err(unavailable)?;
    let select = sqlx::query_scalar(SELECT_STORE_ID).bind(STORE_ID_KEY);
    let Text(stored) = within(select.fetch_one(pool)).await.map_err(unavailable)?;
    StoreId::from_stored(stored)
}

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, source: Box::new(error) }
}

const INSERT_STORE_ID: &str =
    "INSERT INTO store_meta (meta_key, meta_value) VALUES (?, ?) ON DUPLICATE KEY UPDATE meta_key = meta_key";
const SELECT_STORE_ID: &str = "SELECT meta_value FROM store_meta WHERE meta_key = ?";
const SELECT_JOB: &str = concat!("SELECT ", job_columns!(), " FROM job WHERE id = ?");
/// The newest lines of a job's history, newest first.
const SELECT_HISTORY: &str =
    "SELECT status, attempt, update_time, node FROM job_log WHERE job_id = ? ORDER BY id DESC LIMIT ?";
const SELECT_LIVE_BY_BIZ_KEY: &str =
    concat!("SELECT ", job_columns!(), " FROM job WHERE topic = ? AND live_bizkey = ?");
/// A page of a listing: the ids come from the covering `(topic, status, id,
/// run_at)` index, sorted by due time, and only the page's rows are read.
const LIST_FIRST_PAGE: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM (SELECT id AS page_id FROM job WHERE topic = ? AND status = ? ORDER BY run_at, id LIMIT ?) AS page \
     JOIN job ON job.id = page.page_id ORDER BY run_at, id"
);
const LIST_AFTER_CURSOR: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM (SELECT id AS page_id FROM job WHERE topic = ? AND status = ? \
     AND (run_at > ? OR (run_at = ? AND id > ?)) ORDER BY run_at, id LIMIT ?) AS page \
     JOIN job ON job.id = page.page_id ORDER BY run_at, id"
);
const LIVE_JOBS: &str =
    concat!("SELECT ", job_columns!(), " FROM job WHERE is_live = 1 AND id > ? ORDER BY id LIMIT ?");
/// The jobs per topic and state: live states counted from the index of live
/// rows (`job_live_idx`, which carries topic and state), ended states read from
/// the counts the writer keeps. No ended row is read.
pub const COUNTS_QUERY: &str = "SELECT topic, status, COUNT(*) FROM job FORCE INDEX (job_live_idx) \
                                WHERE is_live = 1 GROUP BY topic, status \
                                UNION ALL SELECT topic, status, jobs FROM job_ended_count WHERE jobs > 0 \
                                ORDER BY 1, 2";

#[async_trait]
impl JobStore for MysqlStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn store_id(&self) -> &StoreId {
        &self.store_id
    }

    async fn insert(&self, jobs: Vec<Job>) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.writer.insert(jobs).await
    }

    async fn replace(&self, job: Job) -> Result<(), StoreError> {
        self.writer.replace(job).await
    }

    async fn record(&self, changes: Vec<StateChange>) -> Result<(), StoreError> {
        self.writer.record(changes).await
    }

    fn journal(&self, changes: Vec<StateChange>) {
        self.writer.journal(changes);
    }

    fn journal_backlog(&self) -> usize {
        self.writer.journal_backlog()
    }

    fn check_journal_room(&self) -> Result<(), StoreError> {
        self.writer.check_journal_room()
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.writer.flush().await
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, StoreError> {
        let query = sqlx::query_as(SELECT_JOB).bind(id.as_str());
        let row: Option<JobRow> = within(query.fetch_optional(&self.reader)).await.map_err(unavailable)?;
        row.map(JobRow::into_job).transpose()
    }

    async fn history(&self, id: &JobId, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let query = sqlx::query_as(SELECT_HISTORY).bind(id.as_str()).bind(sql_count(limit));
        let rows: Vec<LogEntryRow> = within(query.fetch_all(&self.reader)).await.map_err(unavailable)?;
        rows.into_iter().rev().map(LogEntryRow::into_entry).collect()
    }

    async fn find_live_by_biz_key(&self, topic: &Topic, biz_key: &str) -> Result<Option<Job>, StoreError> {
        let query = sqlx::query_as(SELECT_LIVE_BY_BIZ_KEY).bind(topic.as_str()).bind(biz_key);
        let row: Option<JobRow> = within(query.fetch_optional(&self.reader)).await.map_err(unavailable)?;
        row.map(JobRow::into_job).transpose()
    }

    async fn list(
        &self,
        topic: &Topic,
        state: JobState,
        limit: usize,
        cursor: Option<&ListCursor>,
    ) -> Result<Vec<Job>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let query = match cursor {
            None => sqlx::query_as(LIST_FIRST_PAGE).bind(topic.as_str()).bind(state.as_str()),
            Some(cursor) => sqlx::query_as(LIST_AFTER_CURSOR)
                .bind(topic.as_str())
                .bind(state.as_str())
                .bind(rows::epoch_ms(cursor.run_at))
                .bind(rows::epoch_ms(cursor.run_at))
                .bind(cursor.id.as_str()),
        };
        let query = query.bind(sql_count(limit));
        let rows: Vec<JobRow> = within(query.fetch_all(&self.reader)).await.map_err(unavailable)?;
        into_jobs(rows)
    }

    async fn live_jobs(&self, after: Option<&JobId>, limit: usize) -> Result<Vec<Job>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Every valid id sorts after the empty string.
        let after = after.map_or("", JobId::as_str);
        let query = sqlx::query_as(LIVE_JOBS).bind(after).bind(sql_count(limit));
        let rows: Vec<JobRow> = within(query.fetch_all(&self.reader)).await.map_err(unavailable)?;
        into_jobs(rows)
    }

    async fn delete_all_live(&self, at: Timestamp) -> Result<Vec<JobId>, StoreError> {
        self.writer.delete_all_live(at).await
    }

    async fn counts(&self) -> Result<Vec<StateCount>, StoreError> {
        let query = sqlx::query_as(COUNTS_QUERY);
        let rows: Vec<(Text, Text, i64)> = within(query.fetch_all(&self.reader)).await.map_err(unavailable)?;
        let mut counts = Vec::with_capacity(rows.len());
        for (Text(topic), Text(status), count) in rows {
            counts.push(StateCount {
                topic: Topic::parse(topic).map_err(|error| rows::corrupt("topic", error))?,
                state: state(&status)?,
                count: number("count", count)?,
            });
        }
        Ok(counts)
    }

    async fn purge_ended(&self, ended_before: Timestamp, limit: usize) -> Result<u64, StoreError> {
        self.writer.purge_ended(ended_before, limit).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        within(sqlx::query("SELECT 1").execute(&self.reader)).await.map_err(unavailable)?;
        Ok(())
    }

    async fn close(&self) {
        if let Some(retention) = &self.retention {
            retention.stop();
        }
        self.writer.close().await;
        self.reader.close().await;
        #[cfg(feature = "testsuite")]
        if let Some(scratch) = &self.scratch {
            scratch.drop_database().await;
        }
    }
}

#[cfg(feature = "testsuite")]
mod scratch;
