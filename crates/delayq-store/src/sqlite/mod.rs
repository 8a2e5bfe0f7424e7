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
//! Layout: this module holds the reads' statements (the reads themselves, like
//! the mapping of rows, are shared with MySQL in `sql`); `dialect`
//! holds the write statements and the `TEMP` triggers with which the writer's
//! connection writes the history line of every job it inserts, and calls on
//! `bulk` to insert many jobs in one statement; `tx` is the writer's connection
//! during a batch; `rows` holds SQLite's SQL fragments of the `job` row;
//! `checkpoint` keeps the WAL short.

mod bulk;
mod checkpoint;
mod dialect;
mod rows;
mod tx;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};

use self::checkpoint::Checkpointer;
use self::dialect::SqliteDialect;
use self::rows::{due_bucket, live_states};
use crate::options::{SqliteSync, StoreOptions};
use crate::sql::reads::{CursorForm, ReadStatements, Reader, Reads};
use crate::sql::rows::job_columns;
use crate::sql::{OverSql, SqlStore};
use crate::store::StoreError;
use crate::writer::host_name;

/// The file name [`SqliteStore::open_in`] uses inside its directory.
pub const DATABASE_FILE_NAME: &str = "delayq.db";

const BACKEND: &str = "sqlite";
/// How long a statement waits for a lock held by another connection or process.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Rows the writer's connection may return before its caller takes them: more
/// than one multi-row update of state changes returns (see `dialect.rs`).
const WRITER_ROW_BUFFER: usize = 1024;
/// How long a read waits for a free connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
const READ_CONNECTIONS: u32 = 4;

static MIGRATOR: Migrator = sqlx::migrate!("../../sql/sqlite");

/// The job store over one SQLite file.
pub struct SqliteStore {
    sql: SqlStore,
    checkpointer: Checkpointer,
    checkpoint_pool: SqlitePool,
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
        self.sql.commits()
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
            // A run of state changes returns a row per job. With sqlx's default
            // of 50 buffered rows, the connection's thread stopped every 50 rows
            // until the writer task took them: a thread hand-off each.
            .row_buffer_size(WRITER_ROW_BUFFER);
        let migration_pool = connect_pool(&writer_options, 1).await?;
        MIGRATOR.run(&migration_pool).await.map_err(unavailable)?;
        let store_id = Reader::new(migration_pool.clone(), BACKEND, &READS, None).store_id().await?;
        // The writer's own connection opens before the migration pool closes:
        // an in-memory database lives only while a connection to it is open.
        let writer_connection = SqliteConnection::connect_with(&writer_options).await.map_err(unavailable)?;
        migration_pool.close().await;
        let checkpoint_pool = connect_pool(&options, 1).await?;
        let read_pool = connect_pool(&options, READ_CONNECTIONS).await?;
        let dialect =
            SqliteDialect::open(writer_options, writer_connection, node, host_name()).await.map_err(unavailable)?;
        let reader = Reader::new(read_pool, BACKEND, &READS, None);
        let sql = SqlStore::start(store_id, reader, dialect, &store_options);
        let checkpointer = Checkpointer::spawn(checkpoint_pool.clone(), sql.commit_counter());
        Ok(SqliteStore {
            sql,
            checkpointer,
            checkpoint_pool,
            #[cfg(feature = "testsuite")]
            _temp_dir: None,
        })
    }
}

#[async_trait]
impl OverSql for SqliteStore {
    fn sql(&self) -> &SqlStore {
        &self.sql
    }

    async fn close_own(&self) {
        self.checkpointer.stop();
        self.checkpoint_pool.close().await;
    }
}

/// Opens a pool of up to `connections` connections with `options`.
async fn connect_pool(options: &SqliteConnectOptions, connections: u32) -> Result<SqlitePool, StoreError> {
    let pool = SqlitePoolOptions::new().max_connections(connections).acquire_timeout(ACQUIRE_TIMEOUT);
    pool.connect_with(options.clone()).await.map_err(unavailable)
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

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, source: Box::new(error) }
}

/// The reads: a listing takes the ids of a page from the covering `(topic,
/// status, id, run_at)` index, sorted by due time, and reads only the page's
/// rows; live jobs come from the partial index of live rows.
static READS: ReadStatements = ReadStatements {
    job: concat!("SELECT ", job_columns!(), " FROM job WHERE id = ?"),
    history: "SELECT status, attempt, update_time, node FROM job_log WHERE job_id = ? ORDER BY id DESC LIMIT ?",
    live_by_biz_key: concat!(
        "SELECT ",
        job_columns!(),
        " FROM job WHERE topic = ? AND bizkey = ? AND status IN ",
        live_states!()
    ),
    list_first_page: concat!(
        "SELECT ",
        job_columns!(),
        " FROM job WHERE id IN (SELECT id FROM job WHERE topic = ? AND status = ? ORDER BY run_at, id LIMIT ?) \
         ORDER BY run_at, id"
    ),
    list_after_cursor: concat!(
        "SELECT ",
        job_columns!(),
        " FROM job WHERE id IN (SELECT id FROM job WHERE topic = ? AND status = ? AND (run_at, id) > (?, ?) \
         ORDER BY run_at, id LIMIT ?) ORDER BY run_at, id"
    ),
    cursor_form: CursorForm::RowValue,
    live_jobs_due: concat!(
        "SELECT ",
        job_columns!(),
        " FROM job INDEXED BY job_live_idx WHERE status IN ",
        live_states!(),
        " AND (",
        due_bucket!(),
        " > ? OR (",
        due_bucket!(),
        " = ? AND id > ?)) AND ",
        due_bucket!(),
        " <= ? ORDER BY ",
        due_bucket!(),
        ", id LIMIT ?"
    ),
    count_live_due: concat!(
        "SELECT COUNT(*), COUNT(CASE WHEN ? = '' OR topic = ? THEN 1 END) FROM \
         (SELECT topic FROM job INDEXED BY job_live_idx WHERE status IN ",
        live_states!(),
        " AND ",
        due_bucket!(),
        " >= ? AND ",
        due_bucket!(),
        " < ? LIMIT ?)"
    ),
    counts: COUNTS_QUERY,
    insert_store_id: "INSERT INTO store_meta (meta_key, meta_value) VALUES (?, ?) ON CONFLICT (meta_key) DO NOTHING",
    pause_topic: "INSERT INTO topic_pause (topic, paused_at) VALUES (?, ?) ON CONFLICT (topic) DO NOTHING",
    declare_group: "INSERT INTO topic_group (topic, group_name, declared_at) VALUES (?, ?, ?) \
                    ON CONFLICT (topic, group_name) DO NOTHING",
};

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
