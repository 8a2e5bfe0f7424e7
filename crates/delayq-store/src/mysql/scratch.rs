//! Throwaway databases for tests: one per store, dropped when the store closes.
//! Those a crashed or panicked test left behind are dropped an hour later by the
//! next test process.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{Connection, Executor};
use tracing::warn;

use super::{unavailable, MysqlStore};
use crate::options::StoreOptions;
use crate::sql::rows::Text;
use crate::store::StoreError;

/// A database [`MysqlStore::open_scratch`] created.
pub(super) struct ScratchDatabase {
    admin: MySqlConnectOptions,
    name: String,
}

impl ScratchDatabase {
    /// Drops the database, logging (not failing) when it cannot.
    pub(super) async fn drop_database(&self) {
        let statement = format!("DROP DATABASE IF EXISTS `{}`", self.name);
        if let Err(error) = execute_once(&self.admin, &statement).await {
            warn!(database = %self.name, cause = %error, "scratch database not dropped");
        }
    }
}

impl MysqlStore {
    /// Creates a database of its own (`dq_test_…`) on the server of `admin_url`,
    /// whose user may create databases, and opens a store on it; `close` drops
    /// the database again. For tests that run side by side on one server.
    ///
    /// # Errors
    /// As [`MysqlStore::open`], and when the database cannot be created.
    pub async fn open_scratch(admin_url: &str, node: String) -> Result<MysqlStore, StoreError> {
        MysqlStore::open_scratch_with_options(admin_url, node, StoreOptions::default()).await
    }

    /// Opens a scratch store as [`MysqlStore::open_scratch`] does, with retention and a journal bound.
    ///
    /// # Errors
    /// As [`MysqlStore::open_scratch`].
    pub async fn open_scratch_with_options(
        admin_url: &str,
        node: String,
        store_options: StoreOptions,
    ) -> Result<MysqlStore, StoreError> {
        let admin = MySqlConnectOptions::from_str(admin_url).map_err(unavailable)?;
        drop_stale_databases_once(&admin).await;
        let scratch = ScratchDatabase { name: scratch_name(), admin };
        let create = format!("CREATE DATABASE `{}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", scratch.name);
        execute_once(&scratch.admin, &create).await.map_err(unavailable)?;
        match MysqlStore::connect(scratch.admin.clone().database(&scratch.name), node, store_options).await {
            Ok(mut store) => {
                store.scratch = Some(scratch);
                Ok(store)
            }
            Err(error) => {
                scratch.drop_database().await;
                Err(error)
            }
        }
    }
}

impl MysqlStore {
    /// Returns the name of the database [`MysqlStore::open_scratch`] created.
    pub fn scratch_database(&self) -> Option<&str> {
        self.scratch.as_ref().map(|scratch| scratch.name.as_str())
    }
}

const SCRATCH_PREFIX: &str = "dq_test_";
/// How old a scratch database must be before another process drops it.
const STALE_AFTER: Duration = Duration::from_secs(3600);

/// Returns a database name no other test, run or process uses (at most 64
/// characters): the prefix, the process id, the creation time and a sequence.
fn scratch_name() -> String {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::UNIX_EPOCH.elapsed().unwrap_or_default().as_nanos();
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{SCRATCH_PREFIX}{}_{nanos}_{sequence}", std::process::id())
}

/// Returns whether `name` is a scratch database created before `STALE_AFTER`.
fn is_stale(name: &str, now_nanos: u128) -> bool {
    let Some(rest) = name.strip_prefix(SCRATCH_PREFIX) else { return false };
    let Some(created) = rest.split('_').nth(1).and_then(|nanos| nanos.parse::<u128>().ok()) else {
        return false;
    };
    now_nanos.saturating_sub(created) > STALE_AFTER.as_nanos()
}

/// Drops, once per process and best-effort, the scratch databases that
/// crashed tests left behind.
async fn drop_stale_databases_once(admin: &MySqlConnectOptions) {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    let list = "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'dq\\_test\\_%'";
    let Ok(mut connection) = MySqlConnection::connect_with(admin).await else { return };
    let names: Vec<Text> = sqlx::query_scalar(list).fetch_all(&mut connection).await.unwrap_or_default();
    let now_nanos = std::time::UNIX_EPOCH.elapsed().unwrap_or_default().as_nanos();
    for Text(name) in names.into_iter().filter(|Text(name)| is_stale(name, now_nanos)) {
        let statement = format!("DROP DATABASE IF EXISTS `{name}`");
        if let Err(error) = connection.execute(statement.as_str()).await {
            warn!(database = %name, cause = %error, "stale scratch database not dropped");
        }
    }
    let _closed = connection.close().await;
}

async fn execute_once(options: &MySqlConnectOptions, statement: &str) -> Result<(), sqlx::Error> {
    let mut connection = MySqlConnection::connect_with(options).await?;
    connection.execute(statement).await?;
    connection.close().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_scratch_databases_are_stale() {
        let day = STALE_AFTER.as_nanos();
        let now = 10 * day;
        assert!(is_stale(&format!("dq_test_42_{}_0", now - 2 * day), now));
        assert!(!is_stale(&format!("dq_test_42_{}_0", now - 60), now));
        assert!(!is_stale("dq_test_42_garbage_0", now));
        assert!(!is_stale(&format!("other_42_{}_0", now - 2 * day), now));
    }

    #[test]
    fn scratch_names_fit_mysql_and_are_not_stale() {
        let name = scratch_name();
        assert!(name.len() <= 64, "{name}");
        let now = std::time::UNIX_EPOCH.elapsed().unwrap_or_default().as_nanos();
        assert!(!is_stale(&name, now));
    }
}
