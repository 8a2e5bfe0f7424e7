//! The knobs of the queue that come from configuration, and the bounds of
//! what one request may ask for.

use std::time::Duration;

use delayq_common::{JobDefaults, Limits, RetryPolicy};

/// The history lines `GET /jobs/{id}` shows unless asked for another number.
pub const DEFAULT_HISTORY_LIMIT: usize = 100;
/// The most history lines one lookup returns.
pub const MAX_HISTORY_LIMIT: usize = 1_000;
/// The most jobs one pop may return.
pub const MAX_POP_COUNT: usize = 100;
/// The longest a pop may wait.
pub const MAX_POP_WAIT: Duration = Duration::from_secs(30);
/// The most jobs one batch push may carry.
pub const MAX_BATCH_PUSH: usize = 1000;
/// The knobs of the queue that come from configuration.
#[derive(Clone, Debug)]
pub struct QueueSettings {
    /// Size limits of a push.
    pub limits: Limits,
    /// Values for options a push leaves out.
    pub defaults: JobDefaults,
    /// The nack backoff of jobs that carry none.
    pub retry: RetryPolicy,
    /// The most jobs one timer round promotes.
    pub promote_batch: usize,
    /// How many jobs restore reads from the store at a time.
    pub restore_batch: usize,
    /// The most pops that may wait for jobs at once.
    pub max_waiters: usize,
    /// How far ahead the scheduler holds delayed jobs ([`crate::horizon`]);
    /// `None`: every job, however far off.
    pub horizon: Option<Duration>,
    /// This node's name, as the registry of consumers shows it.
    pub node: String,
    /// How long a silent consumer stays listed ([`crate::consumers`]).
    pub forget_consumers_after: Duration,
}

/// The default of [`QueueSettings::max_waiters`].
pub const DEFAULT_MAX_WAITERS: usize = 4096;

impl Default for QueueSettings {
    fn default() -> QueueSettings {
        QueueSettings {
            limits: Limits::default(),
            defaults: JobDefaults::default(),
            retry: RetryPolicy::default(),
            promote_batch: 1000,
            restore_batch: 1000,
            max_waiters: DEFAULT_MAX_WAITERS,
            horizon: None,
            node: "standalone".to_owned(),
            forget_consumers_after: crate::consumers::DEFAULT_FORGET_AFTER,
        }
    }
}
