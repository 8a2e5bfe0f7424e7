//! Orders jobs by due time and hands ready jobs to consumers: the
//! [`DelayQueue`] service and its [`Scheduler`] backends.
//!
//! Must not know HTTP, gRPC or brokers; the scheduler backends never touch the store.
//!
//! Layout:
//! - [`service`]: [`DelayQueue`], every operation once, store first then scheduler.
//! - [`scheduler`]: the [`Scheduler`] trait every backend implements.
//! - [`memory`]: the in-process backend.
//! - [`timer`]: the loop that promotes due jobs.
//! - [`fan_out`]: the loop that hands due jobs of topics with consumer groups to their groups.
//! - [`recovery`]: the leader's loop that restores a scheduler that lost its
//!   data and reconciles it with the store.
//! - `activity`: what this process did over the last hour, minute by minute (for the console).
//! - `combine`: calls that arrive together sent to a backend together.
//! - [`failpoint`]: crash points for tests (debug builds only).
//! - [`metrics`]: the metric names.
//! - `testsuite` (feature `testsuite`): the conformance suite every backend runs.

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

pub mod activity;
mod combine;
pub mod consumers;
pub mod error;
pub mod failpoint;
pub mod fan_out;
pub mod horizon;
mod id_locks;
pub mod memory;
pub mod metrics;
pub mod recovery;
pub mod redis;
pub mod scheduler;
pub mod service;
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
pub mod timer;

pub use activity::{Activity, ActivityEvent, ActivityReport, MinuteCounts, ACTIVITY_MINUTES};
pub use consumers::{run_publisher, ConsumerKey, ConsumerView, Consumers};
pub use error::{QueueError, QueueResult, INTERNAL_MESSAGE};
pub use fan_out::run_fan_out;
pub use horizon::run_loader;
pub use memory::MemoryScheduler;
pub use recovery::{run_recovery, RecoveryOptions};
pub use redis::{RedisScheduler, RedisSchedulerOptions};
pub use scheduler::{HorizonMarks, MemoryUse, Promotion, RestoreFence, Scheduler, TopicStats};
pub use service::{
    DelayQueue, Delivery, DueSoon, HorizonStats, JobDetails, JobPage, Pushed, QueueSettings, QueueStats, TopicGroups,
};
pub use timer::{run_timer, run_timer_fenced, LeaseGate};
