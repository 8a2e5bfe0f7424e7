//! Connections: the reader pool's settings, the writer's own connection and
//! the deadline every statement runs under.
//!
//! The writer keeps one connection outside any pool: a pool pings a connection
//! when it is handed out and again when it comes back, two round trips per
//! batch. Its session runs without autocommit, so the statements of a batch
//! form one transaction that `COMMIT` ends; after any failure the connection is
//! dropped (the server rolls back) and the next batch opens a new one.

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPoolOptions};
use sqlx::{Connection, Executor};

use crate::sql::reads::Deadline;

/// How long a caller waits for a connection (including connecting) before
/// the store reports itself unavailable.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(1_500);
/// How long one statement may take before it is given up (a hung or
/// unreachable server must not stall the store forever).
pub(super) const STATEMENT_DEADLINE: Deadline =
    Deadline { limit: Duration::from_secs(10), message: "mysql statement timed out" };
/// An idle writer connection older than this is pinged before it is used, so
/// that one the server closed meanwhile fails no batch.
const PING_IDLE_AFTER: Duration = Duration::from_secs(1);
/// How long that ping may take before a new connection is opened instead.
const PING_TIMEOUT: Duration = Duration::from_millis(500);

/// Session settings of every connection: a lock held by another node is waited
/// for a few seconds, not InnoDB's default 50; oversized values are refused,
/// never truncated.
const SESSION_SETTINGS: &str = "SET SESSION innodb_lock_wait_timeout = 5, \
                                SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',STRICT_ALL_TABLES')";
const WRITER_SESSION_SETTINGS: &str = "SET SESSION autocommit = 0";

/// Returns the options of a pool whose connections carry [`SESSION_SETTINGS`].
pub(super) fn pool_options(max_connections: u32) -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .after_connect(|connection, _meta| {
            Box::pin(async move {
                connection.execute(SESSION_SETTINGS).await?;
                Ok(())
            })
        })
}

/// The writer's connection between two batches.
pub(super) struct WriterConnection {
    options: MySqlConnectOptions,
    idle: Mutex<Option<(MySqlConnection, Instant)>>,
}

impl WriterConnection {
    pub(super) fn new(options: MySqlConnectOptions) -> WriterConnection {
        WriterConnection { options, idle: Mutex::new(None) }
    }

    /// Returns the idle connection if it still answers, else a new one.
    pub(super) async fn take(&self) -> Result<MySqlConnection, sqlx::Error> {
        let idle = self.idle.lock().ok().and_then(|mut slot| slot.take());
        if let Some((mut connection, since)) = idle {
            if since.elapsed() < PING_IDLE_AFTER {
                return Ok(connection);
            }
            if let Ok(Ok(())) = tokio::time::timeout(PING_TIMEOUT, connection.ping()).await {
                return Ok(connection);
            }
        }
        let connect = async {
            let mut connection = MySqlConnection::connect_with(&self.options).await?;
            connection.execute(SESSION_SETTINGS).await?;
            connection.execute(WRITER_SESSION_SETTINGS).await?;
            Ok(connection)
        };
        Deadline { limit: ACQUIRE_TIMEOUT, message: "connecting to mysql timed out" }.run(connect).await
    }

    /// Keeps a connection whose transaction has ended for the next batch.
    pub(super) fn put_back(&self, connection: MySqlConnection) {
        if let Ok(mut slot) = self.idle.lock() {
            *slot = Some((connection, Instant::now()));
        }
    }
}

/// Runs a statement, failing it as an I/O timeout after [`STATEMENT_DEADLINE`].
pub(super) async fn within<T>(statement: impl Future<Output = Result<T, sqlx::Error>>) -> Result<T, sqlx::Error> {
    STATEMENT_DEADLINE.run(statement).await
}
