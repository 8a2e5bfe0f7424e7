//! The retention task: purges ended jobs older than the retention, off the
//! request path, in small batches through the writer.
//!
//! Each batch is one write of the group-commit writer (at most
//! [`PURGE_BATCH`] jobs and their history), so it queues behind the writes
//! waiting at that moment and holds the write connection briefly; a backlog of
//! expired jobs is worked off one batch after another, with other writes in
//! between. A failed purge (the database is down) is tried again at the next
//! interval.

use std::time::Duration;

use delayq_common::Timestamp;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::options::PURGE_BATCH;
use crate::writer::{GroupCommitWriter, PurgeOf};

/// Runs the purge while the store is open; aborted when it closes or is dropped.
pub(crate) struct RetentionTask {
    task: JoinHandle<()>,
}

impl RetentionTask {
    /// Starts purging, every `interval`, the jobs that ended more than
    /// `retention` ago; `None` when there is no retention.
    pub(crate) fn spawn(
        writer: GroupCommitWriter,
        retention: Option<Duration>,
        interval: Duration,
    ) -> Option<RetentionTask> {
        let retention = retention?;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                purge_expired(&writer, retention).await;
            }
        });
        Some(RetentionTask { task })
    }

    /// Stops purging.
    pub(crate) fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for RetentionTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Purges batch after batch until a batch finds fewer than [`PURGE_BATCH`] jobs.
async fn purge_expired(writer: &GroupCommitWriter, retention: Duration) {
    let mut purged = 0u64;
    loop {
        let ended_before = ended_before(Timestamp::now(), retention);
        match writer.purge(PurgeOf::EndedBefore(ended_before), PURGE_BATCH).await {
            Ok(count) => {
                purged += count;
                if count < PURGE_BATCH as u64 {
                    break;
                }
                // Let the writes that queued meanwhile go first.
                tokio::task::yield_now().await;
            }
            Err(error) => {
                warn!(cause = %error, purged, "purge of ended jobs failed, trying again later");
                return;
            }
        }
    }
    if purged > 0 {
        info!(purged, "purged ended jobs past the retention");
    } else {
        debug!("no ended job past the retention");
    }
}

/// The end time before which a job is past `retention` at `now`.
fn ended_before(now: Timestamp, retention: Duration) -> Timestamp {
    let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    Timestamp::from_millis(now.as_millis().saturating_sub(retention_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cutoff_is_the_retention_before_now_and_never_before_the_epoch() {
        let now = Timestamp::from_millis(10_000);
        assert_eq!(ended_before(now, Duration::from_secs(3)), Timestamp::from_millis(7_000));
        assert_eq!(ended_before(now, Duration::from_secs(3_600)), Timestamp::EPOCH);
    }
}
