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
//! Layout: this module holds the reads' statements (the reads themselves, like
//! the mapping of rows, are shared with SQLite in `sql`); `rows` holds
//! MySQL's own part of the row mapping, `dialect` the write statements,
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
use sqlx::migrate::Migrator;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::MySqlPool;

pub use self::connection::ACQUIRE_TIMEOUT;
use self::connection::{pool_options, within, WriterConnection, STATEMENT_DEADLINE};
use self::dialect::MysqlDialect;
use crate::options::StoreOptions;
use crate::sql::reads::{CursorForm, ReadStatements, Reader, Reads};
use crate::sql::rows::job_columns;
use crate::sql::{OverSql, SqlStore};
use crate::store::StoreError;
use crate::writer::host_name;

const BACKEND: &str = "mysql";
const READ_CONNECTIONS: u32 = 8;

static MIGRATOR: Migrator = sqlx::migrate!("../../sql/mysql");

/// The job store over one MySQL or MariaDB database.
pub struct MysqlStore {
    sql: SqlStore,
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
        self.sql.commits()
    }

    async fn connect(
        options: MySqlConnectOptions,
        node: String,
        store_options: StoreOptions,
    ) -> Result<MysqlStore, StoreError> {
        let pool = pool_options(READ_CONNECTIONS).connect_with(options.clone()).await.map_err(unavailable)?;
        migrate(&pool).await?;
        let max_packet_bytes: i64 =
            within(sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)").fetch_one(&pool))
                .await
                .map_err(unavailable)?;
        let max_packet_bytes = usize::try_from(max_packet_bytes).unwrap_or(usize::MAX);
        let reader = Reader::new(pool, BACKEND, &READS, Some(STATEMENT_DEADLINE));
        let store_id = reader.store_id().await?;
        let dialect = MysqlDialect::new(
            WriterConnection::new(options.statement_cache_capacity(chunks::WRITER_STATEMENT_CACHE)),
            node,
            host_name(),
            max_packet_bytes,
        );
        Ok(MysqlStore {
            sql: SqlStore::start(store_id, reader, dialect, &store_options),
            #[cfg(feature = "testsuite")]
            scratch: None,
        })
    }
}

#[async_trait]
impl OverSql for MysqlStore {
    fn sql(&self) -> &SqlStore {
        &self.sql
    }

    async fn close_own(&self) {
        #[cfg(feature = "testsuite")]
        if let Some(scratch) = &self.scratch {
            scratch.drop_database().await;
        }
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

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, source: Box::new(error) }
}

/// The reads: a listing takes the ids of a page from the covering `(topic,
/// status, id, run_at)` index, sorted by due time, and reads only the page's
/// rows; live jobs come from the index of live rows.
static READS: ReadStatements = ReadStatements {
    job: concat!("SELECT ", job_columns!(), " FROM job WHERE id = ?"),
    history: "SELECT status, attempt, update_time, node FROM job_log WHERE job_id = ? ORDER BY id DESC LIMIT ?",
    live_by_biz_key: concat!("SELECT ", job_columns!(), " FROM job WHERE topic = ? AND live_bizkey = ?"),
    list_first_page: concat!(
        "SELECT ",
        job_columns!(),
        " FROM (SELECT id AS page_id FROM job WHERE topic = ? AND status = ? ORDER BY run_at, id LIMIT ?) AS page \
         JOIN job ON job.id = page.page_id ORDER BY run_at, id"
    ),
    list_after_cursor: concat!(
        "SELECT ",
        job_columns!(),
        " FROM (SELECT id AS page_id FROM job WHERE topic = ? AND status = ? \
         AND (run_at > ? OR (run_at = ? AND id > ?)) ORDER BY run_at, id LIMIT ?) AS page \
         JOIN job ON job.id = page.page_id ORDER BY run_at, id"
    ),
    cursor_form: CursorForm::Expanded,
    live_jobs_due: LIVE_JOBS_DUE_QUERY,
    count_live_due: "SELECT COUNT(*), COUNT(CASE WHEN ? = '' OR topic = ? THEN 1 END) FROM \
                     (SELECT topic FROM job FORCE INDEX (job_live_idx) WHERE is_live = 1 \
                     AND due_bucket >= ? AND due_bucket < ? LIMIT ?) AS scanned",
    counts: COUNTS_QUERY,
    pause_topic: "INSERT IGNORE INTO topic_pause (topic, paused_at) VALUES (?, ?)",
    declare_group: "INSERT IGNORE INTO topic_group (topic, group_name, declared_at) VALUES (?, ?, ?)",
    insert_store_id: "INSERT INTO store_meta (meta_key, meta_value) VALUES (?, ?) \
                      ON DUPLICATE KEY UPDATE meta_key = meta_key",
};

/// A page of live jobs after a cursor and up to a due-time bucket, in
/// `(bucket, id)` order (a restore's and the horizon loader's read). The index
/// is named so that each page is a seek to the cursor in it: left to itself
/// the optimizer may read the index by `is_live` alone and test the cursor on
/// every entry before the page, which makes a restore's cost grow with the
/// square of the live jobs.
pub const LIVE_JOBS_DUE_QUERY: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM job FORCE INDEX (job_live_idx) WHERE is_live = 1 \
     AND (due_bucket > ? OR (due_bucket = ? AND id > ?)) AND due_bucket <= ? ORDER BY due_bucket, id LIMIT ?"
);

/// The jobs per topic and state: live states counted from the index of live
/// rows (`job_live_idx`, which carries topic and state), ended states read from
/// the counts the writer keeps. No ended row is read.
pub const COUNTS_QUERY: &str = "SELECT topic, status, COUNT(*) FROM job FORCE INDEX (job_live_idx) \
                                WHERE is_live = 1 GROUP BY topic, status \
                                UNION ALL SELECT topic, status, jobs FROM job_ended_count WHERE jobs > 0 \
                                ORDER BY 1, 2";

#[cfg(feature = "testsuite")]
mod scratch;
