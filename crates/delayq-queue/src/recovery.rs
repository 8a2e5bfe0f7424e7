//! Automatic recovery, run by the leader next to the timer: notices that an
//! external scheduler (Redis) lost its data and restores it from the store, and
//! reconciles the two periodically, so that no operator has to call `/reStore`.
//!
//! - Every [`RecoveryOptions::check_every`] the scheduler is asked whether it
//!   kept its data ([`Scheduler::check_intact`](crate::Scheduler::check_intact)).
//!   When it did not (restart without persistence, FLUSHALL, failover to an
//!   empty replica), every live job of the store is restored, and the restore
//!   is retried until it succeeds (the store may be down too).
//! - At the start of the term and every [`RecoveryOptions::reconcile_every`]
//!   after, the store's live jobs are compared with the scheduler and the
//!   missing ones put back: the store is ahead after a crash between the two
//!   writes of an operation, or a push whose scheduler write failed.
//!
//! Both are logged and counted in the metrics (`delayq_scheduler_data_losses_total`,
//! `delayq_reconciliations_total`, `delayq_reconciled_jobs_total`,
//! `delayq_restored_jobs_total`). An in-process scheduler is rebuilt by `serve`
//! before it listens and is never watched.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics as queue_metrics;
use crate::service::DelayQueue;

/// How often the leader checks the scheduler for lost data by default.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often the leader reconciles the scheduler with the store by default.
pub const DEFAULT_RECONCILE_EVERY: Duration = Duration::from_secs(300);

/// How often recovery looks.
#[derive(Clone, Debug)]
pub struct RecoveryOptions {
    /// The pause between two data-loss checks (also the retry pause of a failed restore).
    pub check_every: Duration,
    /// The pause between two reconciliations; the first runs when the term starts.
    pub reconcile_every: Duration,
}

impl Default for RecoveryOptions {
    fn default() -> RecoveryOptions {
        RecoveryOptions { check_every: DEFAULT_CHECK_EVERY, reconcile_every: DEFAULT_RECONCILE_EVERY }
    }
}

/// What the loop still owes the scheduler.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pending {
    Nothing,
    /// The scheduler lost its data and is not fully restored yet.
    Restore,
}

/// Runs recovery until `cancel` fires; does nothing while `holds_leadership` is false.
pub async fn run_recovery(
    queue: Arc<DelayQueue>,
    cancel: CancellationToken,
    holds_leadership: impl Fn() -> bool + Send,
    options: RecoveryOptions,
) {
    if !queue.scheduler().is_external() {
        return;
    }
    queue_metrics::register_recovery();
    let mut pending = Pending::Nothing;
    let mut next_reconcile = Instant::now();
    let mut lease = crate::timer::LeaseGate::new("recovery", holds_leadership);
    loop {
        if !lease.pass(&cancel).await {
            return;
        }
        pending = check_scheduler(&queue, pending).await;
        if pending == Pending::Restore {
            pending = restore_lost_data(&queue).await;
            if pending == Pending::Nothing {
                // A full restore is a full reconciliation.
                next_reconcile = Instant::now() + options.reconcile_every;
            }
        }
        if pending == Pending::Nothing && Instant::now() >= next_reconcile {
            if reconcile(&queue).await {
                next_reconcile = Instant::now() + options.reconcile_every;
            } else {
                next_reconcile = Instant::now() + options.check_every;
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(options.check_every) => {}
        }
    }
}

/// Asks the scheduler whether it kept its data; returns what is owed afterwards.
async fn check_scheduler(queue: &DelayQueue, pending: Pending) -> Pending {
    match queue.scheduler().check_intact().await {
        Ok(true) => pending,
        Ok(false) => {
            // A scheduler never marked before (a new Redis) reads the same way.
            warn!(
                scheduler = queue.scheduler().backend(),
                "scheduler lost its data (or is new), restoring it from the store"
            );
            queue_metrics::record_data_loss();
            Pending::Restore
        }
        Err(error) => {
            debug!(error = %error, "scheduler check failed, trying again");
            pending
        }
    }
}

async fn restore_lost_data(queue: &DelayQueue) -> Pending {
    let started = Instant::now();
    match queue.reconcile().await {
        Ok(added) => {
            info!(
                restored = added,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "scheduler restored from the store"
            );
            Pending::Nothing
        }
        Err(error) => {
            warn!(error = %error, "restore after data loss failed, trying again");
            Pending::Restore
        }
    }
}

/// Runs one reconciliation; returns whether it completed.
async fn reconcile(queue: &DelayQueue) -> bool {
    match queue.reconcile().await {
        Ok(repaired) => {
            queue_metrics::record_reconciliation(repaired);
            if repaired > 0 {
                warn!(repaired, "reconciliation put back live jobs the scheduler did not hold");
            } else {
                debug!("reconciliation found the scheduler complete");
            }
            true
        }
        Err(error) => {
            warn!(error = %error, "reconciliation failed, trying again");
            false
        }
    }
}
