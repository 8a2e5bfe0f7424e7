//! The `Scheduler` trait: the hot state of the queue (delay buckets, ready
//! queues, reservations), kept apart from the durable store.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use tokio::sync::Notify;

use crate::consumers::ConsumerView;
use crate::error::QueueResult;

/// How many jobs of a topic are in each live state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicStats {
    /// The topic.
    pub topic: Topic,
    /// Jobs waiting for their due time.
    pub delay: u64,
    /// Due jobs waiting for a consumer.
    pub ready: u64,
    /// Jobs handed to a consumer.
    pub reserved: u64,
}

/// What one round of the timer did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Promotion {
    /// Every job whose state changed, as it is after the change: `ready`
    /// (promoted or redelivered after its ttr), `dead` (out of retries) or
    /// `expired` (ttl passed while ready).
    pub changed: Vec<Job>,
    /// The earliest instant at which something will be due next, if anything is scheduled.
    pub next_due: Option<Timestamp>,
    /// Whether due work was left over because the batch was full.
    pub more: bool,
}

/// Where a restore stands among the jobs the scheduler was told to end: taken
/// by [`Scheduler::open_restore`] before the restore reads the store, and
/// carried by its write ([`Scheduler::restore_batch`]). The default fences nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreFence {
    /// Per shard of the backend, the instant (in the backend's own clock) the
    /// restore opened its window at.
    marks: Vec<u64>,
}

impl RestoreFence {
    /// A fence with one mark per shard.
    pub fn new(marks: Vec<u64>) -> RestoreFence {
        RestoreFence { marks }
    }

    /// Returns the mark of `shard`, if the fence has one.
    pub fn mark(&self, shard: usize) -> Option<u64> {
        self.marks.get(shard).copied()
    }
}

/// The two marks of a scheduler's horizon (see [`Scheduler::admit_until`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HorizonMarks {
    /// A new job due at or before this instant is held at once by
    /// [`Scheduler::schedule`]; one due later is left to the store.
    pub admit: Timestamp,
    /// Every live job due at or before this instant is held: the loader
    /// filled the scheduler from the store up to it. `None`: not even once.
    pub loaded: Option<Timestamp>,
}

/// How full the scheduler's memory is, where the backend has a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUse {
    /// Bytes in use.
    pub used: u64,
    /// The bound (Redis `maxmemory`).
    pub max: u64,
}

/// The scheduling half of the queue.
///
/// Contract every backend keeps:
/// - It holds only live jobs (`delay`, `ready`, `reserved`) and never touches the store.
/// - Every method is atomic with respect to every other call, from this node or
///   another: no interleaving loses, duplicates or resurrects a job.
/// - A job becomes `ready` no earlier than its `run_at`; among jobs ready at the
///   same time a lower `priority` number is reserved first, then earlier `run_at`.
/// - [`Scheduler::reserve`] moves a ready job to `reserved` and arms its ttr at
///   `now + ttr`; [`Scheduler::promote_due`] redelivers it (`ready`, `attempt + 1`)
///   or marks it `dead` when [`Job::has_retries_left`] is false.
/// - A `ready` job with a ttl that is still unpopped at `run_at + ttl` becomes `expired`.
/// - Jobs that end (`finished`, `deleted`, `dead`, `expired`) are removed.
#[async_trait]
pub trait Scheduler: Send + Sync + 'static {
    /// Returns the backend name (`memory`, `redis`).
    fn backend(&self) -> &'static str;

    /// Adds a new job: `ready` when its `run_at` has passed, else `delay`.
    /// A job due after the horizon's admission mark ([`Scheduler::admit_until`])
    /// is not held: it stays in the store until the loader brings it.
    ///
    /// # Errors
    /// [`crate::QueueError::Conflict`] when a live job has this id.
    async fn schedule(&self, job: &Job) -> QueueResult<()>;

    /// Adds several new jobs, each judged alone (backends may pipeline them).
    async fn schedule_batch(&self, jobs: &[Job]) -> QueueResult<Vec<QueueResult<()>>> {
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs {
            outcomes.push(self.schedule(job).await);
        }
        Ok(outcomes)
    }

    /// Adds a job from the store unless the scheduler already holds it; returns whether it was added.
    ///
    /// Ended jobs are never added. A job stored as `reserved` comes back `reserved`
    /// until its ttr deadline ([`reservation_deadline`]): its consumer may still be
    /// working on it, and it is redelivered (or dead) only when that deadline passes.
    async fn restore(&self, job: &Job) -> QueueResult<bool>;

    /// Prepares a restore, before it reads the store: until the restore writes
    /// back what it read (with the returned fence), a backend shared by several
    /// nodes remembers every job it is told to end, so that the write skips a
    /// job another node ended after the read (its store row said live; it is
    /// not). An in-process backend needs none: every end goes through this
    /// process, which keeps them out of a restore's way.
    ///
    /// # Errors
    /// When the backend cannot be reached.
    async fn open_restore(&self) -> QueueResult<RestoreFence> {
        Ok(RestoreFence::default())
    }

    /// Restores several jobs, each as [`Scheduler::restore`] does, read from the
    /// store after `fence` was opened; returns whether each was added. A job
    /// ended since the fence is not added.
    ///
    /// # Errors
    /// The whole call fails when the backend does (some jobs may have been added:
    /// restoring again is harmless), or when the fence is too old to be
    /// trusted (the restore took too long; it can start again).
    async fn restore_batch(&self, jobs: &[Job], fence: &RestoreFence) -> QueueResult<Vec<bool>> {
        let _ = fence;
        let mut added = Vec::with_capacity(jobs.len());
        for job in jobs {
            added.push(self.restore(job).await?);
        }
        Ok(added)
    }

    /// Returns whether the jobs this scheduler returns carry their payload.
    /// A scheduler that answers `false` keeps only what orders a job, hands it
    /// out and moves it through its states, and returns jobs
    /// [`Job::without_payload`]: the service reads the rest from the store
    /// where it needs it (a pop, a nack's backoff, a replace refused).
    fn holds_payloads(&self) -> bool {
        true
    }

    /// Returns whether the scheduler's state lives outside this process (a server
    /// that can restart empty, be flushed or fail over). Such a scheduler is
    /// watched by the leader ([`crate::recovery`]) and reconciled with the store.
    fn is_external(&self) -> bool {
        false
    }

    /// Returns `false` when the scheduler lost its data since the previous call
    /// (or was never checked before), `true` when it kept it; marks it so the next
    /// call answers `true` until the data is lost again.
    ///
    /// A backend living in this process keeps its data for as long as the process
    /// runs and always answers `true`.
    async fn check_intact(&self) -> QueueResult<bool> {
        Ok(true)
    }

    /// Raises the horizon's admission mark to `until` (it never goes down):
    /// from now on [`Scheduler::schedule`] holds every new job due by then.
    /// Returns the loaded mark ([`HorizonMarks::loaded`]) as it is, the lowest
    /// of every part of a sharded backend; `None` when some part has none (a
    /// new or emptied scheduler), which is then loaded from the start.
    ///
    /// A scheduler that never had its admission mark raised holds every job
    /// (no horizon). The mark is raised before the store is read, so a push
    /// that the scheduler turned away was stored before the read, and the
    /// read finds it.
    async fn admit_until(&self, until: Timestamp) -> QueueResult<Option<Timestamp>>;

    /// Raises the loaded mark to `until` (it never goes down), once every live
    /// job of the store due by then is held.
    async fn mark_loaded(&self, until: Timestamp) -> QueueResult<()>;

    /// Returns the horizon's marks (the lowest of every part of a sharded
    /// backend); `None` while the admission mark was never raised (or some part lost it).
    async fn horizon(&self) -> QueueResult<Option<HorizonMarks>>;

    /// Returns how full the backend's memory is, when it has a bound.
    async fn memory_use(&self) -> QueueResult<Option<MemoryUse>> {
        Ok(None)
    }

    /// Replaces a waiting (`delay` or `ready`) job atomically; returns the job as scheduled.
    ///
    /// # Errors
    /// `NotFound` when absent; `WrongState` when it is `reserved`.
    async fn replace(&self, job: &Job) -> QueueResult<Job>;

    /// Reserves up to `count` ready jobs of `topic`, waiting up to `wait` for the first.
    ///
    /// Returns the jobs as reserved (`state = reserved`); empty when none came in time.
    async fn reserve(&self, topic: &Topic, count: usize, wait: Duration) -> QueueResult<Vec<Job>>;

    /// Ends a reserved job; returns it as it was. With `attempt`, only that
    /// delivery of it: a job redelivered since is left alone.
    ///
    /// # Errors
    /// `NotFound` when absent; `WrongState` when it is not `reserved`;
    /// `StaleAttempt` when `attempt` is not its current delivery.
    async fn finish(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job>;

    /// Gives a reserved job back: `delay` (or `ready`) after `delay` with `attempt + 1`,
    /// or `dead` when it has no retries left; returns it after the change. With
    /// `attempt`, only that delivery of it (errors as [`Scheduler::finish`]).
    async fn nack(&self, id: &JobId, attempt: Option<u32>, delay: Duration) -> QueueResult<Job>;

    /// Restarts the ttr clock of a reserved job; returns it after the change.
    /// With `attempt`, only that delivery of it (errors as [`Scheduler::finish`]).
    async fn touch(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job>;

    /// Removes a live job in any state; returns it as it was.
    async fn delete(&self, id: &JobId) -> QueueResult<Job>;

    /// Removes each of these live jobs that the scheduler holds; returns how many it held.
    async fn delete_batch(&self, ids: &[JobId]) -> QueueResult<u64> {
        let mut removed = 0;
        for id in ids {
            match self.delete(id).await {
                Ok(_) => removed += 1,
                Err(crate::QueueError::NotFound(_)) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(removed)
    }

    /// Returns the live job with this id.
    async fn get(&self, id: &JobId) -> QueueResult<Option<Job>>;

    /// Promotes what is due at `now`, at most `max_batch` jobs: delayed jobs to
    /// ready, expired reservations to ready or dead, stale ready jobs to expired.
    async fn promote_due(&self, now: Timestamp, max_batch: usize) -> QueueResult<Promotion>;

    /// Marks this node's timer rounds with its leader `epoch` (terms are numbered
    /// upwards). A backend shared by several nodes records the highest epoch it
    /// has seen and refuses rounds of a lower one, so a stale leader cannot
    /// promote once its successor has. In-process backends ignore it.
    fn fence(&self, epoch: u64) {
        let _ = epoch;
    }

    /// Returns the signal raised when a job due sooner than the last reported
    /// `next_due` may have arrived; the timer waits on it.
    fn wakeup(&self) -> Arc<Notify>;

    /// Publishes the consumers of node `node` (`local`, as that node sees them
    /// now) where every node sharing this scheduler sees them, and returns
    /// every node's, this one's included, leaving out those not seen since
    /// `forget_before`. A scheduler in this process serves one node: it returns `local`.
    ///
    /// # Errors
    /// When the backend cannot be reached.
    async fn share_consumers(
        &self,
        node: &str,
        local: &[ConsumerView],
        forget_before: Timestamp,
    ) -> QueueResult<Vec<ConsumerView>> {
        let _ = (node, forget_before);
        Ok(local.to_vec())
    }

    /// Returns the live counts per topic.
    async fn stats(&self) -> QueueResult<Vec<TopicStats>>;

    /// Removes every job; returns how many there were.
    async fn clear(&self) -> QueueResult<u64>;

    /// Checks that the backend answers.
    async fn ping(&self) -> QueueResult<()>;
}

/// Returns the live state a job enters when (re)scheduled at `now`.
pub fn waiting_state(run_at: Timestamp, now: Timestamp) -> JobState {
    if run_at <= now {
        JobState::Ready
    } else {
        JobState::Delay
    }
}

/// Returns when a job stored as `reserved` is redelivered if nobody finishes it:
/// its ttr after the reservation (`updated_at + ttr`); `None` for other states.
pub fn reservation_deadline(job: &Job) -> Option<Timestamp> {
    (job.state == JobState::Reserved).then(|| job.updated_at.plus(job.ttr))
}

/// Checks that `attempt`, when a caller named one, is the current delivery of `job`.
///
/// # Errors
/// [`crate::QueueError::StaleAttempt`] when it is not.
pub fn check_attempt(job: &Job, attempt: Option<u32>) -> QueueResult<()> {
    check_attempt_of(&job.id, job.attempt, attempt)
}

/// [`check_attempt`] of job `id` whose delivery is `current`.
pub fn check_attempt_of(id: &JobId, current: u32, attempt: Option<u32>) -> QueueResult<()> {
    match attempt {
        Some(held) if held != current => {
            Err(crate::QueueError::StaleAttempt { id: id.clone(), attempt: held, current })
        }
        _ => Ok(()),
    }
}
