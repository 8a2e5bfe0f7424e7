//! The per-topic part of the in-process scheduler: the ready queue, the
//! counters and the signal long-polling consumers wait on.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Notify;

use delayq_common::Topic;

use super::state::{ReadyKey, Slot};

/// The per-topic part of the state.
pub(super) struct TopicQueue {
    /// The topic, shared by every job of it the state holds.
    pub(super) name: Arc<Topic>,
    /// The ready jobs, most urgent first.
    pub(super) ready: BTreeMap<ReadyKey, Slot>,
    /// How many jobs wait for their due time.
    pub(super) delay: u64,
    /// How many jobs are reserved.
    pub(super) reserved: u64,
    /// Raised once per job made ready; consumers long-polling this topic wait on it.
    pub(super) signal: Arc<Notify>,
    /// How many consumers wait on `signal`; the entry is kept while anyone waits,
    /// so a waiter and the jobs that arrive later always share one signal.
    pub(super) waiters: usize,
}

impl TopicQueue {
    pub(super) fn new(name: Arc<Topic>) -> TopicQueue {
        TopicQueue { name, ready: BTreeMap::new(), delay: 0, reserved: 0, signal: Arc::new(Notify::new()), waiters: 0 }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.delay == 0 && self.reserved == 0
    }

    /// Empty and nobody waiting on it.
    pub(super) fn is_unused(&self) -> bool {
        self.is_empty() && self.waiters == 0
    }
}
