//! WAL checkpoints, mostly off the commit path, and a WAL that starts over.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses its
//! threshold: that commit copies the WAL back into the database and fsyncs
//! both while every caller of its group waits. Here a task of its own, on a
//! connection of its own (so on another thread), runs a `PASSIVE` checkpoint
//! shortly after the writer committed. It never blocks the writer; frames the
//! writer appends meanwhile wait for the next pass.
//!
//! SQLite starts the WAL over (writes it from its beginning again) only when a
//! write transaction begins with every frame already copied back, which under
//! steady commits this task alone almost never achieves. So the writer's own
//! automatic checkpoint stays, at a modest threshold: once the WAL holds that
//! many frames, the commit that crossed it copies what this task has not yet
//! copied (at most one interval's commits) and the next transaction starts the
//! WAL over. The WAL stays near that size instead of growing to hundreds of
//! megabytes of file and page cache.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::SqlitePool;
use tokio::task::JoinHandle;
use tracing::debug;

/// How long after a commit the checkpoint runs (and how often it looks). Short,
/// so that what the writer's own checkpoint has left to copy is short too.
pub(super) const INTERVAL: Duration = Duration::from_millis(10);
/// WAL frames (pages) after which the writer checkpoints inside its commit
/// (SQLite's default is 1000): 16 MiB, after which the WAL starts over.
///
/// A much larger threshold let the WAL grow without ever starting over (to many
/// times the database's size, with the page cache it fills), and left the
/// backstop checkpoint a long copy inside one commit; passes further apart left
/// the writer more of them to copy itself, a longer tail of lateness. The
/// measurements behind these two values are in docs/design.md ("A WAL
/// that starts over").
pub(super) const WRITER_THRESHOLD_PAGES: u32 = 4_096;

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
