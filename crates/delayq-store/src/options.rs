//! The options of a store beyond where its database lives.

use std::time::Duration;

/// The most state changes the journal holds by default.
pub const DEFAULT_JOURNAL_MAX: usize = 100_000;
/// How often the retention task looks for ended jobs to purge by default.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// The most jobs one purge statement deletes (with their history), so that a
/// purge never holds the writer long.
pub const PURGE_BATCH: usize = 1_000;

/// When SQLite syncs a commit to the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SqliteSync {
    /// Every commit is synced before it is acknowledged (`synchronous=FULL`):
    /// nothing acknowledged is lost on an OS crash or power cut. The group
    /// commit pays one sync for all the writes it carries.
    #[default]
    Full,
    /// The WAL is synced at checkpoints only (`synchronous=NORMAL`): a killed
    /// process loses nothing, an OS crash or power cut may lose the last
    /// acknowledged commits.
    Normal,
}

/// How a store keeps its tables and its journal bounded, and how SQLite syncs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// How long an ended job (finished, deleted, dead, expired) and its history
    /// are kept after it ended; `None` keeps them forever.
    pub retention: Option<Duration>,
    /// How often the retention task looks for ended jobs older than the retention.
    pub purge_interval: Duration,
    /// The most journaled state changes that may wait for the database; past
    /// it [`crate::JobStore::check_journal_room`] refuses.
    pub journal_max: usize,
    /// When the SQLite store syncs a commit; the MySQL store ignores it (the
    /// server's own `innodb_flush_log_at_trx_commit` decides there).
    pub sqlite_sync: SqliteSync,
}

impl Default for StoreOptions {
    /// No retention (nothing is purged), the default journal bound, full syncs.
    fn default() -> StoreOptions {
        StoreOptions {
            retention: None,
            purge_interval: DEFAULT_PURGE_INTERVAL,
            journal_max: DEFAULT_JOURNAL_MAX,
            sqlite_sync: SqliteSync::Full,
        }
    }
}

impl StoreOptions {
    /// Returns the options of a config's `retention_ms` (0: keep forever) and `journal_max`.
    pub fn from_config(retention_ms: u64, journal_max: usize) -> StoreOptions {
        let retention = (retention_ms > 0).then(|| Duration::from_millis(retention_ms));
        StoreOptions { retention, journal_max, ..StoreOptions::default() }
    }
}
