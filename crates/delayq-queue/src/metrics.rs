//! The queue's Prometheus metrics, recorded through the `metrics` facade so
//! that every face (REST, gRPC, forwarder) counts alike.

use delayq_common::{Job, JobState, Timestamp};

/// Jobs accepted by push.
pub const PUSHES: &str = "delayq_pushes_total";
/// Jobs handed to consumers.
pub const POPS: &str = "delayq_pops_total";
/// Jobs acknowledged.
pub const FINISHES: &str = "delayq_finishes_total";
/// Jobs given back by consumers.
pub const NACKS: &str = "delayq_nacks_total";
/// Jobs deleted.
pub const DELETES: &str = "delayq_deletes_total";
/// Timer transitions, labelled by the state entered.
pub const TRANSITIONS: &str = "delayq_timer_transitions_total";
/// Jobs put back into the scheduler from the store.
pub const RESTORED: &str = "delayq_restored_jobs_total";
/// Times the leader found that the scheduler had lost its data (Redis restarted
/// empty, flushed, failed over to an empty replica) and restored it from the store.
pub const DATA_LOSSES: &str = "delayq_scheduler_data_losses_total";
/// Reconciliation runs that compared the store with the scheduler.
pub const RECONCILIATIONS: &str = "delayq_reconciliations_total";
/// Live jobs of the store that reconciliation found missing from the scheduler and put back.
pub const RECONCILED: &str = "delayq_reconciled_jobs_total";
/// Jobs of topics with groups handed to their groups (each made one delivery per group).
pub const FANNED_OUT: &str = "delayq_fanned_out_jobs_total";
/// Seconds between a job's due time and its delivery.
pub const LATENESS: &str = "delayq_delivery_lateness_seconds";

pub(crate) fn record_pushes(count: u64) {
    metrics::counter!(PUSHES).increment(count);
}

pub(crate) fn record_delivery(run_at: Timestamp, now: Timestamp) {
    metrics::counter!(POPS).increment(1);
    metrics::histogram!(LATENESS).record(now.since(run_at).as_secs_f64());
}

pub(crate) fn record_finish() {
    metrics::counter!(FINISHES).increment(1);
}

pub(crate) fn record_nack() {
    metrics::counter!(NACKS).increment(1);
}

pub(crate) fn record_delete() {
    metrics::counter!(DELETES).increment(1);
}

pub(crate) fn record_fan_out(jobs: usize) {
    metrics::counter!(FANNED_OUT).increment(jobs as u64);
}

pub(crate) fn record_restored(count: u64) {
    metrics::counter!(RESTORED).increment(count);
}

pub(crate) fn record_promotion(changed: &[Job]) {
    for state in [JobState::Ready, JobState::Dead, JobState::Expired] {
        let count = changed.iter().filter(|job| job.state == state).count() as u64;
        if count > 0 {
            metrics::counter!(TRANSITIONS, "state" => state.as_str()).increment(count);
        }
    }
}

pub(crate) fn record_data_loss() {
    metrics::counter!(DATA_LOSSES).increment(1);
}

pub(crate) fn record_reconciliation(repaired: u64) {
    metrics::counter!(RECONCILIATIONS).increment(1);
    metrics::counter!(RECONCILED).increment(repaired);
}

/// Makes the recovery counters visible (at zero) before anything happened.
pub(crate) fn register_recovery() {
    metrics::counter!(DATA_LOSSES).increment(0);
    metrics::counter!(RECONCILIATIONS).increment(0);
    metrics::counter!(RECONCILED).increment(0);
    metrics::counter!(RESTORED).increment(0);
}
