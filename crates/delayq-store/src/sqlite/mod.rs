//! The SQLite backend: the durable store of the embedded deployment.
//!
//! Writes go through the group-commit writer ([`crate::writer`]) on a single
//! write connection; reads use a separate pool and run in parallel with it
//! (WAL readers never block the writer).
//!
//! Durability: the database runs in WAL journal mode with `synchronous=FULL`
//! by default. A commit returns once its frames are written to the WAL file
//! and the file is synced, so every write acknowledged to a caller survives
//! the process being killed and an OS crash or power cut. The group commit
//! writer pays that sync once for all the writes a transaction carries.
//! [`SqliteSync::Normal`] (`store.sqlite_synchronous = "normal"`) syncs the WAL
//! at checkpoints only: still safe against a killed process, but an OS crash
//! or power loss may lose the last acknowledged commits (never corrupting the
//! file).
//!
//! Retention and counts: ended jobs past the retention are purged in batches by
//! a task of the store ([`crate::retention`]); `/stats` counts live jobs from
//! the partial index of live rows and reads ended counts from `job_ended_count`,
//! which triggers of the schema keep (see `sql/sqlite/0003_retention_and_counts.sql`).
//!
//! Layout: `rows` maps rows to jobs, `dialect` holds the write statements and
//! the `TEMP` triggers with which the writer's connection writes the history
//! line of every job it inserts, `bulk` inserts many jobs in few statements.

mod bulk;
mod checkpoint;
mod dialect;
mod rows;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};

use self::checkpoint::Checkpointer;
use self::dialect::SqliteDialect;
use self::rows::{job_columns, live_states, number, sql_count, state, JobRow, LogEntryRow};
use crate::identity::{StoreId, STORE_ID_KEY};
use crate::options::{SqliteSync, StoreOptions};
use crate::retention::RetentionTask;
use crate::store::{JobStore, ListCursor, LogEntry, StateChange, StateCount, StoreError};
use crate::writer::{host_name, GroupCommitWriter};

/// The file name [`SqliteStore::open_in`] uses inside its directory.
pub const DATABASE_FILE_NAME: &str = "delayq.db";

const BACKEND: &str = "sqlite";
/// How long a statement waits for a lock held by another connection or process.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Rows the writer's connection may return before its caller takes them: more
/// than one multi-row insert returns (see `bulk.rs`).
const WRITER_ROW_BUFFER: usize = 1024;
/// How long a read waits for a free connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
const READ_CONNECTIONS: u32 = 4;

static MIGRATOR: Migrator = sqlx::migrate!("../../sql/sqlite");

/// The job store over one SQLite file.
pub struct SqliteStore {
    store_id: StoreId,
    reader: SqlitePool,
    writer: GroupCommitWriter,
    checkpointer: Checkpointer,
    checkpoint_pool: SqlitePool,
    retention: Option<RetentionTask>,
    /// Removes the database of [`SqliteStore::open_temp`] when the store is dropped.
    #[cfg(feature = "testsuite")]
    _temp_dir: Option<tempfile::TempDir>,
}

impl SqliteStore {
    /// Opens (creating the file and its parent directories when missing) the
    /// database at a path or a `sqlite:` URL, and applies the migrations.
    /// `node` names this process in `job_log`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the URL is invalid or the file cannot be
    /// created, opened or migrated.
    pub async fn open(path_or_url: &str, node: String) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with_options(path_or_url, node, StoreOptions::default()).await
    }

    /// Opens the database as [`SqliteStore::open`] does, with retention and a
    /// journal bound.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub async fn open_with_options(
        path_or_url: &str,
        node: String,
        store_options: StoreOptions,
    ) -> Result<SqliteStore, StoreError> {
        let options = if path_or_url.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(path_or_url).map_err(unavailable)?
        } else {
            SqliteConnectOptions::new().filename(path_or_url)
        };
        SqliteStore::connect(options, node, store_options).await
    }

    /// Opens the database `delayq.db` inside `dir` (see [`SqliteStore::open`]).
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub async fn open_in(dir: &Path, node: String) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_in_with_options(dir, node, StoreOptions::default()).await
    }

    /// Opens the database `delayq.db` inside `dir`, with retention and a journal bound.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub async fn open_in_with_options(
        dir: &Path,
        node: String,
        store_options: StoreOptions,
    ) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::new().filename(dir.join(DATABASE_FILE_NAME));
        SqliteStore::connect(options, node, store_options).await
    }

    /// Opens a store on a fresh file in a temporary directory that is removed
    /// when the store is dropped; for tests.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    #[cfg(feature = "testsuite")]
    pub async fn open_temp(node: String) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_temp_with_options(node, StoreOptions::default()).await
    }

    /// Opens a store on a fresh temporary file as [`SqliteStore::open_temp`]
    /// does, with retention and a journal bound; for tests.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    #[cfg(feature = "testsuite")]
    pub async fn open_temp_with_options(node: String, store_options: StoreOptions) -> Result<SqliteStore, StoreError> {
        let dir = tempfile::tempdir().map_err(unavailable)?;
        let mut store = SqliteStore::open_in_with_options(dir.path(), node, store_options).await?;
        store._temp_dir = Some(dir);
        Ok(store)
    }

    /// Returns how many transactions the writer has committed (each may carry
    /// the writes of many callers).
    pub fn commits(&self) -> u64 {
        self.writer.commits()
    }

    /// Reads back when the database syncs its commits, as SQLite applied it
    /// (every connection of the store is opened with the same setting).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database cannot be read, or runs
    /// with a setting the store never asks for.
    pub async fn sqlite_sync(&self) -> Result<SqliteSync, StoreError> {
        let level: i64 =
            sqlx::query_scalar("PRAGMA synchronous").fetch_one(&self.checkpoint_pool).await.map_err(unavailable)?;
        match level {
            2 => Ok(SqliteSync::Full),
            1 => Ok(SqliteSync::Normal),
            other => Err(unavailable(std::io::Error::other(format!("unexpected PRAGMA synchronous = {other}")))),
        }
    }

    async fn connect(
        options: SqliteConnectOptions,
        node: String,
        store_options: StoreOptions,
    ) -> Result<SqliteStore, StoreError> {
        create_parent_dir(options.get_filename()).await?;
        let synchronous = match store_options.sqlite_sync {
            SqliteSync::Full => SqliteSynchronous::Full,
            SqliteSync::Normal => SqliteSynchronous::Normal,
        };
        let options = options
            .create_if_missing(true)
            .synchronous(synchronous)
            .busy_timeout(BUSY_TIMEOUT)
            // Sorting and `IN` lists use in-memory scratch tables, not a temp file per statement.
            .pragma("temp_store", "memory")
            // Negative: KiB, per connection. The hot pages of a busy queue stay
            // cached; a larger cache costs more at every commit (SQLite walks its
            // hash of cached pages) than it saves in reads (docs/design.md).
            .pragma("cache_size", "-8192");
        let writer_options = options
            .clone()
            .journal_mode(SqliteJournalMode::Wal)
            .pragma("wal_autocheckpoint", checkpoint::WRITER_THRESHOLD_PAGES.to_string())
            // A batch insert returns a row per job. With sqlx's default of 50
            // buffered rows, the connection's thread stopped every 50 rows until
            // the writer task (on the runtime) took them: a thread hand-off each.
            .row_buffer_size(WRITER_ROW_BUFFER);
        let migration_pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(writer_options.clone())
            .await
            .map_err(unavailable)?;
        MIGRATOR.run(&migration_pool).await.map_err(unavailable)?;
        let store_id = shared_store_id(&migration_pool).await?;
        // The writer's own connection opens before the migration pool closes:
        // an in-memory database lives only while a connection to it is open.
        let writer_connection = SqliteConnection::connect_with(&writer_options).await.map_err(unavailable)?;
        migration_pool.close().await;
        let checkpoint_pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await
            .map_err(unavailable)?;
        let reader = SqlitePoolOptions::new()
            .max_connections(READ_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(unavailable)?;
        let dialect =
            SqliteDialect::open(writer_options, writer_connection, node, host_name()).await.map_err(unavailable)?;
        let writer = GroupCommitWriter::spawn(dialect, store_options.journal_max);
        let checkpointer = Checkpointer::spawn(checkpoint_pool.clone(), writer.commit_counter());
        let retention = RetentionTask::spawn(writer.clone(), store_options.retention, store_options.purge_interval);
        Ok(SqliteStore {
            store_id,
            reader,
            writer,
            checkpointer,
            checkpoint_pool,
            retention,
            #[cfg(feature = "testsuite")]
            _temp_dir: None,
        })
    }
}

/// Creates the directory of a database file (not for in-memory databases).
async fn create_parent_dir(file: &Path) -> Result<(), StoreError> {
    let name = file.to_string_lossy();
    if name.starts_with(':') || name.starts_with("file:") {
        return Ok(());
    }
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => tokio::fs::create_dir_all(dir).await.map_err(unavailable),
        _ => Ok(()),
    }
}

/// Records a new store id unless the file holds one, and returns the one it
/// holds: processes opening the file at once all read the first writer's.
async fn shared_store_id(pool: &SqlitePool) -> Result<StoreId, StoreError> {
    let generated = StoreId::generate();
    let insert = sqlx::query(INSERT_STORE_ID).bind(STORE_ID_KEY).bind(generated.as_str());
    insert.execute(pool).await.map_err(unavailable)?;
    let stored: String =
        sqlx::query_scalar(SELECT_STORE_ID).bind(STORE_ID_KEY).fetch_one(pool).await.map_err(unavailable)?;
    StoreId::from_stored(stored)
}

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, source: Box::new(error) }
}

fn into_jobs(rows: Vec<JobRow>) -> Result<Vec<Job>, StoreError> {
    rows.into_iter().map(JobRow::into_job).collect()
}

const INSERT_STORE_ID: &str =
    "INSERT INTO store_meta (meta_key, meta_value) VALUES (?, ?) ON CONFLICT (meta_key) DO NOTHING";
const SELECT_STORE_ID: &str = "SELECT meta_value FROM store_meta WHERE meta_key = ?";
const SELECT_JOB: &str = concat!("SELECT ", job_columns!(), " FROM job WHERE id = ?");
/// The newest lines of a job's history, newest first.
const SELECT_HISTORY: &str =
    "SELECT status, attempt, update_time, node FROM job_log WHERE job_id = ? ORDER BY id DESC LIMIT ?";
const SELECT_LIVE_BY_BIZ_KEY: &str =
    concat!("SELECT ", job_columns!(), " FROM job WHERE topic = ? AND bizkey = ? AND status IN ", live_states!());
/// A page of a listing: the ids come from the covering `(topic, status, id,
/// run_at)` index, sorted by due time, and only the page's rows are read.
const LIST_FIRST_PAGE: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM job WHERE id IN (SELECT id FROM job WHERE topic = ? AND status = ? ORDER BY run_at, id LIMIT ?) \
     ORDER BY run_at, id"
);
const LIST_AFTER_CURSOR: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM job WHERE id IN (SELECT id FROM job WHERE topic = ? AND status = ? AND (run_at, id) > (?, ?) \
     ORDER BY run_at, id LIMIT ?) ORDER BY run_at, id"
);
const LIVE_JOBS: &str =
    concat!("SELECT ", job_columns!(), " FROM job WHERE status IN ", live_states!(), " AND id > ? ORDER BY id LIMIT ?");
/// The jobs per topic and state: live states counted from the partial index of
/// live rows (`job_live_idx`, which carries topic and state), ended states read
/// from the counts the triggers keep. No ended row is read.
pub const COUNTS_QUERY: &str = concat!(
    "SELECT topic, status, COUNT(*) FROM job INDEXED BY job_live_idx WHERE status IN ",
    live_states!(),
    " GROUP BY topic, status \
     UNION ALL SELECT topic, status, jobs FROM job_ended_count WHERE jobs > 0 \
     ORDER BY 1, 2"
);

#[async_trait]
impl JobStore for SqliteStore {
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
        let row: Option<JobRow> =
            sqlx::query_as(SELECT_JOB).bind(id.as_str()).fetch_optional(&self.reader).await.map_err(unavailable)?;
        row.map(JobRow::into_job).transpose()
    }

    async fn history(&self, id: &JobId, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows: Vec<LogEntryRow> = sqlx::query_as(SELECT_HISTORY)
            .bind(id.as_str())
            .bind(sql_count(limit))
            .fetch_all(&self.reader)
            .await
            .map_err(unavailable)?;
        rows.into_iter().rev().map(LogEntryRow::into_entry).collect()
    }

    async fn find_live_by_biz_key(&self, topic: &Topic, biz_key: &str) -> Result<Option<Job>, StoreError> {
        let row: Option<JobRow> = sqlx::query_as(SELECT_LIVE_BY_BIZ_KEY)
            .bind(topic.as_str())
            .bind(biz_key)
            .fetch_optional(&self.reader)
            .await
            .map_err(unavailable)?;
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
                .bind(cursor.id.as_str()),
        };
        let rows: Vec<JobRow> = query.bind(sql_count(limit)).fetch_all(&self.reader).await.map_err(unavailable)?;
        into_jobs(rows)
    }

    async fn live_jobs(&self, after: Option<&JobId>, limit: usize) -> Result<Vec<Job>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Every valid id sorts after the empty string.
        let after = after.map_or("", JobId::as_str);
        let rows: Vec<JobRow> = sqlx::query_as(LIVE_JOBS)
            .bind(after)
            .bind(sql_count(limit))
            .fetch_all(&self.reader)
            .await
            .map_err(unavailable)?;
        into_jobs(rows)
    }

    async fn delete_all_live(&self, at: Timestamp) -> Result<Vec<JobId>, StoreError> {
        self.writer.delete_all_live(at).await
    }

    async fn counts(&self) -> Result<Vec<StateCount>, StoreError> {
        let rows: Vec<(String, String, i64)> =
            sqlx::query_as(COUNTS_QUERY).fetch_all(&self.reader).await.map_err(unavailable)?;
        let mut counts = Vec::with_capacity(rows.len());
        for (topic, status, count) in rows {
            counts.push(StateCount {
                topic: Topic::parse(topic).map_err(|error| StoreError::Corrupt(format!("topic: {error}")))?,
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
        sqlx::query("SELECT 1").execute(&self.reader).await.map_err(unavailable)?;
        Ok(())
    }

    async fn close(&self) {
        if let Some(retention) = &self.retention {
            retention.stop();
        }
        self.writer.close().await;
        self.checkpointer.stop();
        self.checkpoint_pool.close().await;
        self.reader.close().await;
    }
}
