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
//! - [`recovery`]: the leader's loop that restores a scheduler that lost its
//!   data and reconciles it with the store.
//! - [`failpoint`]: crash points for tests (debug builds only).
//! - [`metrics`]: the metric names.
//! - `testsuite` (feature `testsuite`): the conformance suite every backend runs.

pub mod error;
pub mod failpoint;
mod id_locks;
pub mod memory;
pub mod metrics;
pub mod recovery;
pub mod redis;
pub mod scheduler;
pub mod service;
#[cfg(feature = "testsuite")]
pub mod testsuite;
pub mod timer;

pub use error::{QueueError, QueueResult};
pub use memory::MemoryScheduler;
pub use recovery::{run_recovery, RecoveryOptions};
pub use redis::{RedisScheduler, RedisSchedulerOptions};
pub use scheduler::{Promotion, Scheduler, TopicStats};
pub use service::{DelayQueue, JobDetails, JobPage, Pushed, QueueSettings, QueueStats};
pub use timer::{lease_pause, run_timer, run_timer_fenced};
