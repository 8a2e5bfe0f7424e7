//! WAL checkpoints off the commit path.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses its
//! threshold: that commit copies the WAL back into the database and fsyncs
//! both while every caller of its group waits. Here a task of its own, on a
//! connection of its own (so on another thread), runs a `PASSIVE` checkpoint
//! shortly after the writer committed. It never blocks the writer; frames the
//! writer appends meanwhile wait for the next pass. The writer's own automatic
//! checkpoint stays as a backstop with a higher threshold: should this task
//! fall behind, the WAL is still bounded, and since the pages this task already
//! copied are not copied again, that checkpoint is short.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::SqlitePool;
use tokio::task::JoinHandle;
use tracing::debug;

/// How long after a commit the checkpoint runs (and how often it looks).
pub(super) const INTERVAL: Duration = Duration::from_millis(100);
/// WAL frames (pages) after which the writer checkpoints inside its commit
/// (SQLite's default is 1000), about 256 MiB.
///
/// Under steady writes the WAL is seldom fully checkpointed at the moment the
/// writer starts a transaction, which is when SQLite starts it over, so it grows
/// until this threshold. From there every commit tries a checkpoint of its own
/// and syncs the WAL while its callers wait: at 8,192 pages the 20,000 jobs of
/// the lateness benchmark crossed it, and 40 commits took 15–40 ms each, which
/// held up finishes and with them the consumers' next pops.
pub(super) const WRITER_THRESHOLD_PAGES: u32 = 65_536;

/// Runs checkpoints while the store is open; aborted when it is dropped.
pub(super) struct Checkpointer {
    task: JoinHandle<()>,
}

impl Checkpointer {
    /// Starts checkpointing `pool` (one connection) whenever `commits` moved on.
    pub(super) fn spawn(pool: SqlitePool, commits: Arc<AtomicU64>) -> Checkpointer {
        let task = tokio::spawn(async move {
            let mut seen = commits.load(Ordering::Relaxed);
            loop {
                tokio::time::sleep(INTERVAL).await;
                let now = commits.load(Ordering::Relaxed);
                if now == seen {
                    continue;
                }
                seen = now;
                if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await {
                    // The writer's own checkpoint covers for a failed pass.
                    debug!(cause = %error, "background checkpoint failed");
                }
            }
        });
        Checkpointer { task }
    }

    /// Stops checkpointing.
    pub(super) fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
