//! The store's Prometheus metrics, recorded through the `metrics` facade.

use std::time::Duration;

/// Transactions the group-commit writer committed, labelled by backend.
pub const COMMITS: &str = "delayq_store_commits_total";
/// Rows (jobs written and state changes) those transactions carried, labelled by backend.
pub const COMMITTED_ROWS: &str = "delayq_store_committed_rows_total";
/// Seconds from the start of a transaction to its commit, labelled by backend.
pub const COMMIT_SECONDS: &str = "delayq_store_commit_seconds";

pub(crate) fn record_commit(backend: &'static str, rows: usize, took: Duration) {
    metrics::counter!(COMMITS, "backend" => backend).increment(1);
    metrics::counter!(COMMITTED_ROWS, "backend" => backend).increment(rows as u64);
    metrics::histogram!(COMMIT_SECONDS, "backend" => backend).record(took.as_secs_f64());
}
