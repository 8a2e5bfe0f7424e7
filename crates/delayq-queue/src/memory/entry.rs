//! What the in-process scheduler keeps of one live job: only what orders it,
//! hands it out and moves it through its states; the body and the rest of
//! the payload stay in the store.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};

use super::state::ReadyKey;

/// What the scheduler keeps of one live job, and where it is filed.
pub(super) struct Entry {
    pub(super) id: JobId,
    /// Shared with every job of the topic ([`super::topic::TopicQueue::name`]).
    pub(super) topic: Arc<Topic>,
    pub(super) create_time: Timestamp,
    pub(super) run_at: Timestamp,
    pub(super) updated_at: Timestamp,
    pub(super) ttr: Duration,
    pub(super) ttl: Duration,
    pub(super) attempt: u32,
    pub(super) max_retries: u32,
    pub(super) priority: u8,
    pub(super) state: JobState,
    /// Its one pending instant in the timeline: `run_at` when delayed, the
    /// ttl expiry when ready (if it has a ttl), the ttr deadline when reserved.
    pub(super) due: Option<Timestamp>,
    /// The sequence number of its filing, which makes its keys unique: it is
    /// at `(due, seq)` in the timeline, and at `(priority, run_at, seq)` in
    /// its topic's ready queue while ready.
    pub(super) seq: u64,
}

impl Entry {
    pub(super) fn new(job: &Job, topic: Arc<Topic>) -> Entry {
        Entry {
            id: job.id.clone(),
            topic,
            create_time: job.create_time,
            run_at: job.run_at,
            updated_at: job.updated_at,
            ttr: job.ttr,
            ttl: job.ttl,
            attempt: job.attempt,
            max_retries: job.max_retries,
            priority: job.priority,
            state: job.state,
            due: None,
            seq: 0,
        }
    }

    /// Returns the job as held, without its payload.
    pub(super) fn job(&self) -> Job {
        Job {
            id: self.id.clone(),
            topic: Topic::clone(&self.topic),
            subtopic: None,
            body: String::new(),
            biz_key: None,
            create_time: self.create_time,
            delay: Duration::ZERO,
            run_at: self.run_at,
            ttr: self.ttr,
            priority: self.priority,
            max_retries: self.max_retries,
            retry_backoff: Vec::new(),
            ttl: self.ttl,
            attempt: self.attempt,
            state: self.state,
            result: None,
            updated_at: self.updated_at,
            groups: Vec::new(),
        }
    }

    pub(super) fn has_retries_left(&self) -> bool {
        Job::retries_left(self.attempt, self.max_retries)
    }

    pub(super) fn ready_key(&self) -> ReadyKey {
        (self.priority, self.run_at, self.seq)
    }
}
