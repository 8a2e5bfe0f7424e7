//! The durable delayq job store: the [`JobStore`] trait and its SQL backends.
//!
//! Must not know Redis or the scheduler.
//!
//! Who writes a job's history (`job_log`): the line of every state change is
//! written by the writer, in the transaction that makes the change. The line
//! of a push (or of a replace) goes in with the job's row as well, but who
//! writes it depends on the dialect:
//! - SQLite: two `TEMP` triggers on the writer's connection, as the row is
//!   inserted or an ended row is rewritten, so a batch of pushes is a single
//!   statement with no second one for its history.
//! - MySQL / MariaDB: the writer, in the multi-row inserts of history lines it
//!   sends with the commit.
//!
//! Layout:
//! - [`store`]: the [`JobStore`] trait, its errors and record types.
//! - [`identity`]: [`StoreId`], the identity of a store's database.
//! - [`sqlite`]: the SQLite backend (embedded deployment).
//! - [`mysql`]: the MySQL / MariaDB backend (distributed deployment).
//! - `sql`: what the two share: their one [`JobStore`] implementation, the
//!   reads, the mapping of rows and the binding of values; each dialect keeps
//!   its own SQL.
//! - [`metrics`]: the names of the writer's Prometheus metrics.
//! - [`options`]: retention and the journal bound.
//! - `retention`: the background task that purges ended jobs past the retention.
//! - `writer`: group commit shared by the SQL backends (one writer task, one
//!   transaction per batch of queued writes).
//! - `testsuite` (feature `testsuite`): the conformance suite every backend runs.

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

pub mod identity;
pub mod metrics;
pub mod mysql;
pub mod options;
mod retention;
mod sql;
pub mod sqlite;
pub mod store;
#[cfg(feature = "testsuite")]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable,
    reason = "the conformance suite is test code: a failed expectation is a failed test"
)]
pub mod testsuite;
mod writer;

pub use identity::StoreId;
pub use mysql::MysqlStore;
pub use options::{SqliteSync, StoreOptions};
pub use sqlite::SqliteStore;
pub use store::{
    bucket_end, due_bucket, job_bucket, BoxError, DueCount, DueCursor, JobStore, ListCursor, LogEntry, StateChange,
    StateCount, StoreError, COARSE_BUCKETS, DUE_BUCKET_MS, FAR_AHEAD_MS, MAX_DELIVERIES,
};
