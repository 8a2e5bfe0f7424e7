//! A database that does not take writes, for tests of what callers see then.

use std::path::Path;

use sqlx::{Connection, SqliteConnection};

/// SQLite's write lock on a database file, held by a connection of its own:
/// until [`SqliteWriteLock::release`], a store on that file commits nothing
/// (its writes wait, then fail as unavailable), while reads go on.
pub struct SqliteWriteLock {
    connection: SqliteConnection,
}

impl SqliteWriteLock {
    /// Takes the write lock of the database file at `path`.
    ///
    /// # Panics
    /// When the file cannot be opened or the lock cannot be taken (a test helper).
    pub async fn take(path: &Path) -> SqliteWriteLock {
        let url = format!("sqlite://{}", path.display());
        let mut connection =
            SqliteConnection::connect(&url).await.unwrap_or_else(|error| panic!("connect to {url}: {error}"));
        if let Err(error) = sqlx::query("BEGIN IMMEDIATE").execute(&mut connection).await {
            panic!("take the write lock of {url}: {error}");
        }
        SqliteWriteLock { connection }
    }

    /// Releases the lock; the store's waiting writes then commit.
    ///
    /// # Panics
    /// When the connection fails (a test helper).
    pub async fn release(mut self) {
        if let Err(error) = sqlx::query("ROLLBACK").execute(&mut self.connection).await {
            panic!("release the write lock: {error}");
        }
        let _closed = self.connection.close().await;
    }
}
