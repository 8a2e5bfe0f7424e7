//! The `DelayQueue` service: every operation, implemented once, over a
//! [`JobStore`] (the source of truth) and a [`Scheduler`] (the hot state).
//!
//! Write order: anything a client is told succeeded is committed to the
//! store first and applied to the scheduler second. A crash between the two
//! leaves the store ahead of the scheduler, which restore (run by the leader's
//! reconciliation, [`crate::recovery`]) repairs; never the other way round for
//! an acknowledged write. Changes the scheduler makes by itself (promotion,
//! ttr expiry, dead, expired) are journaled in order after it made them; a
//! job they ended that the store still calls live is ended again by the
//! scheduler when restore brings it back (it keeps its attempt and deadline).
//!
//! Restore never duplicates a job (the scheduler adds only jobs it does not
//! hold) and never brings back a finished or deleted one: those are ended in
//! the store first; restore reads each page of the store and adds what the
//! scheduler lacks while no operation of this process that ends a job is
//! under way. Another node may end a job of the page after the read: the
//! restore opens a fence in the scheduler before it reads
//! ([`Scheduler::open_restore`]), and the scheduler skips, in the write, every
//! job it was told to end since, so such a job is never handed out again.
//! A job the store ended without the scheduler hearing of it is taken out
//! again after the write, once the store is re-read.
//!
//! Layout: this module holds the service, its settings and answers, and the
//! operations on one job; `pop` the pop, `push` the single push and replace,
//! `bury` burying a reserved job and deleting a dead one, `batch` the batch
//! push's pipeline, `payloads` the reads of popped jobs' payloads, `restore`
//! restore, reconciliation and clearAll, `settings` its knobs and bounds,
//! `stats` the counts of `/stats`, `consumers` the registry of consumers,
//! `operators` running a job now and retrying dead ones, `paused` paused
//! topics, `groups` and `fan_out` consumer groups, `lookups` reads of jobs,
//! `cached` what the store says that each node trusts for a second.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{
    ConsumerName, Group, InvalidField, Job, JobId, JobState, PushRequest, Snowflake, Timestamp, Topic,
};
use delayq_store::{bucket_end, due_bucket, DueCursor, JobStore, ListCursor, LogEntry, StateChange};
use futures::stream::{FuturesOrdered, StreamExt};
use tokio::sync::{mpsc, Mutex, RwLock, RwLockWriteGuard, Semaphore};
use tracing::{info, instrument, warn};

use self::payloads::{PayloadStore, Payloads};
use crate::activity::{Activity, ActivityEvent};
use crate::combine::Combiner;
use crate::consumers::Consumers;
use crate::error::{QueueError, QueueResult};
use crate::failpoint;
use crate::horizon::{HorizonStatus, HORIZON_OFF};
use crate::id_locks::IdLocks;
use crate::metrics as queue_metrics;
use crate::scheduler::{check_attempt, Promotion, Scheduler};

mod batch;
mod bury;
mod cached;
mod consumers;
mod due_soon;
mod fan_out;
mod groups;
mod lookups;
mod operators;
mod paused;
mod payloads;
mod pop;
mod push;
mod restore;
mod settings;
mod stats;

pub use self::due_soon::{DueSoon, DUE_SOON_SCAN};
pub use self::groups::{Delivery, TopicGroups, MAX_GROUPS_PER_TOPIC};
pub use self::settings::{
    QueueSettings, DEFAULT_HISTORY_LIMIT, DEFAULT_MAX_WAITERS, MAX_BATCH_PUSH, MAX_HISTORY_LIMIT, MAX_POP_COUNT,
    MAX_POP_WAIT,
};
use self::stats::{CountsSnapshot, StoredCounts};
pub use self::stats::{HorizonStats, QueueStats};

/// What a successful push returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The job's id (generated when the push gave none).
    pub id: JobId,
    /// When it is due.
    pub run_at: Timestamp,
}

/// A job with its history, as `GET /jobs/{id}` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobDetails {
    /// The job, with its freshest state.
    pub job: Job,
    /// Its newest state changes (as many as asked for), oldest first.
    pub history: Vec<LogEntry>,
    /// Each group's delivery of it, by group, when its topic has groups.
    pub deliveries: Vec<Delivery>,
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPage {
    /// The jobs, oldest due first.
    pub jobs: Vec<Job>,
    /// Where the next page starts, when this one was full.
    pub next: Option<ListCursor>,
}

/// The delay queue: push, pop, finish, nack, touch, delete, restore, ...
pub struct DelayQueue {
    scheduler: Arc<dyn Scheduler>,
    store: Arc<dyn JobStore>,
    ids: Snowflake,
    settings: QueueSettings,
    /// Held shared by every operation that ends or moves a job in the store
    /// and then in the scheduler (finish, nack, delete, clearAll), and by a
    /// timer round until its changes are handed to the journal. Restore holds
    /// it exclusively while it reads a page of the store and adds what the
    /// scheduler lacks, so none of these falls between its read and its write
    /// (which would bring an ended job back).
    transitions: RwLock<()>,
    /// Held across both writes of every operation on a caller-named id (see [`IdLocks`]).
    id_locks: IdLocks,
    /// Held by a replace from its store write until the store and the
    /// scheduler agree, and by a pop while it reads the payloads of what it
    /// reserved ([`Scheduler::holds_payloads`]): a consumer never gets the
    /// payload of a replace that was refused because it reserved the job.
    payload_locks: IdLocks,
    /// The reads of payloads of the pops that arrive together.
    payloads: Arc<Combiner<Payloads>>,
    /// Held shared by every push across its store and scheduler writes, and
    /// exclusively by clearAll: a push is either wholly before the clear (and
    /// cleared) or wholly after it (and kept), never stored live and then
    /// taken out of the scheduler.
    pushes: RwLock<()>,
    /// One permit per pop waiting for jobs.
    waiters: Semaphore,
    /// Held by a load of the horizon and by a restore, one at a time.
    loading: Mutex<()>,
    /// The span the loader loads ahead now.
    horizon_status: HorizonStatus,
    /// The last count of the store, reused while it is fresh enough.
    stored_counts: Mutex<Option<StoredCounts>>,
    /// The last count of the store, for readers that do not wait for a new one.
    counts_snapshot: CountsSnapshot,
    /// The consumers that reach this node.
    consumers: Consumers,
    /// The paused topics, as this node last read them.
    paused: cached::Cached<std::collections::HashSet<Topic>>,
    /// The consumer groups of each topic, as this node last read them.
    groups: cached::Cached<groups::TopicGroups>,
    /// What this process did over the last hour, minute by minute.
    activity: Activity,
}

impl DelayQueue {
    /// Creates the service over a scheduler and a store.
    pub fn new(
        scheduler: Arc<dyn Scheduler>,
        store: Arc<dyn JobStore>,
        ids: Snowflake,
        settings: QueueSettings,
    ) -> DelayQueue {
        let waiters = Semaphore::new(settings.max_waiters);
        let horizon_status = HorizonStatus::new(settings.horizon);
        let payloads = Arc::new(Combiner::new(Arc::new(PayloadStore { store: Arc::clone(&store) })));
        let consumers = Consumers::new(settings.node.clone(), settings.forget_consumers_after);
        DelayQueue {
            scheduler,
            store,
            ids,
            settings,
            transitions: RwLock::new(()),
            id_locks: IdLocks::new(),
            payload_locks: IdLocks::new(),
            payloads,
            pushes: RwLock::new(()),
            waiters,
            loading: Mutex::new(()),
            horizon_status,
            stored_counts: Mutex::new(None),
            counts_snapshot: CountsSnapshot::default(),
            consumers,
            paused: cached::Cached::default(),
            groups: cached::Cached::default(),
            activity: Activity::default(),
        }
    }

    /// Returns what this process did over the last hour.
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// Counts accepted pushes, for `/metrics` and for the last hour.
    fn record_pushes(&self, count: u64) {
        queue_metrics::record_pushes(count);
        self.activity.record(ActivityEvent::Pushed, count);
    }

    /// Returns where the horizon's loader stands on this node.
    pub fn horizon_status(&self) -> &HorizonStatus {
        &self.horizon_status
    }

    /// Returns the span the scheduler holds ahead now, `None` without a horizon.
    fn horizon_span(&self) -> Option<Duration> {
        self.settings.horizon.map(|_| self.horizon_status.span())
    }

    /// Returns the configured settings.
    pub fn settings(&self) -> &QueueSettings {
        &self.settings
    }

    /// Returns the scheduler backend.
    pub fn scheduler(&self) -> &Arc<dyn Scheduler> {
        &self.scheduler
    }

    /// Returns the store backend.
    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Acknowledges a reserved job, storing the consumer's result. With
    /// `attempt`, only that delivery of it.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` when it is not
    /// reserved (an ended job names its state); `StaleAttempt` when `attempt`
    /// is not its current delivery.
    #[instrument(level = "debug", skip(self, result))]
    pub async fn finish(&self, id: &JobId, attempt: Option<u32>, result: Option<String>) -> QueueResult<Job> {
        let job = self.end_reserved(id, attempt, JobState::Finished, result).await?;
        queue_metrics::record_finish();
        self.activity.record(ActivityEvent::Finished, 1);
        Ok(job)
    }

    /// Ends a reserved job as `ended` (with `attempt`, only that delivery of
    /// it): in the store, then in the scheduler. Errors as [`DelayQueue::finish`].
    pub(super) async fn end_reserved(
        &self,
        id: &JobId,
        attempt: Option<u32>,
        ended: JobState,
        result: Option<String>,
    ) -> QueueResult<Job> {
        let _id_guard = self.id_locks.lock(id).await;
        let _transition = self.transitions.read().await;
        let (mut job, _held) = self.live_job_or_stored(id).await?;
        require_reserved(&job)?;
        check_attempt(&job, attempt)?;
        let now = Timestamp::now();
        job.state = ended;
        job.result = result;
        job.updated_at = now;
        self.store.record(vec![StateChange::of(&job, now)]).await?;
        match self.scheduler.finish(id, attempt).await {
            Ok(_) | Err(QueueError::NotFound(_)) => {}
            Err(refused @ (QueueError::WrongState { .. } | QueueError::StaleAttempt { .. })) if attempt.is_some() => {
                // Its ttr ran out between the check and now, and the consumer
                // named the delivery it held: that one is over, so the store
                // takes back the job's current state.
                self.record_as_scheduled(id).await?;
                return Err(refused);
            }
            // Its ttr ran out between the check and now; the client's ack still wins.
            Err(QueueError::WrongState { .. } | QueueError::StaleAttempt { .. }) => {
                self.forget_in_scheduler(id).await?
            }
            Err(error) => return Err(error),
        }
        self.consumers.released(id);
        Ok(job)
    }

    /// Gives a reserved job back for a retry after `delay` (or its backoff).
    /// With `attempt`, only that delivery of it (errors as [`DelayQueue::finish`]).
    #[instrument(level = "debug", skip(self))]
    pub async fn nack(&self, id: &JobId, attempt: Option<u32>, delay: Option<Duration>) -> QueueResult<Job> {
        let _id_guard = self.id_locks.lock(id).await;
        let _transition = self.transitions.read().await;
        let (job, held) = self.live_job_or_stored(id).await?;
        require_reserved(&job)?;
        check_attempt(&job, attempt)?;
        let job = if held { self.with_payload(job).await? } else { job };
        let delay = delay.unwrap_or_else(|| job.backoff(&self.settings.retry));
        if delay > self.settings.limits.max_delay {
            return Err(InvalidField::new(
                "delay",
                format!("must be at most {} ms", self.settings.limits.max_delay.as_millis()),
            )
            .into());
        }
        let now = Timestamp::now();
        let expected = nacked(&job, delay, now);
        self.store.record(vec![StateChange::of(&expected, now)]).await?;
        let nacked_job = if held {
            self.nack_in_scheduler(id, attempt, delay).await?
        } else if expected.state.is_terminal() || self.scheduler.restore(&expected).await? {
            // The scheduler had lost it: it comes back as the store now has it.
            expected
        } else {
            // Restore brought the reservation back meanwhile.
            self.nack_in_scheduler(id, attempt, delay).await?
        };
        queue_metrics::record_nack();
        self.activity.record(ActivityEvent::Failed, 1);
        self.consumers.released(id);
        Ok(nacked_job)
    }

    /// Nacks in the scheduler what the store already records as nacked; when
    /// the delivery the consumer named is over meanwhile, the store takes back
    /// the job's current state.
    async fn nack_in_scheduler(&self, id: &JobId, attempt: Option<u32>, delay: Duration) -> QueueResult<Job> {
        match self.scheduler.nack(id, attempt, delay).await {
            Err(refused @ (QueueError::WrongState { .. } | QueueError::StaleAttempt { .. })) => {
                self.record_as_scheduled(id).await?;
                Err(refused)
            }
            other => other,
        }
    }

    /// Records in the store the job as the scheduler holds it now (after an
    /// operation the store took was refused by the scheduler).
    async fn record_as_scheduled(&self, id: &JobId) -> QueueResult<()> {
        if let Some(current) = self.scheduler.get(id).await? {
            self.store.record(vec![StateChange::of(&current, Timestamp::now())]).await?;
        }
        Ok(())
    }

    /// Restarts the ttr clock of a reserved job. With `attempt`, only that
    /// delivery of it (errors as [`DelayQueue::finish`]).
    #[instrument(level = "debug", skip(self))]
    pub async fn touch(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        match self.scheduler.touch(id, attempt).await {
            Err(QueueError::NotFound(_)) => {}
            other => return other,
        }
        // The scheduler does not hold it: the store tells an ended job from one
        // that never was, and a reservation the scheduler lost comes back first.
        let (job, _held) = self.live_job_or_stored(id).await?;
        require_reserved(&job)?;
        check_attempt(&job, attempt)?;
        self.scheduler.restore(&job).await?;
        self.scheduler.touch(id, attempt).await
    }

    /// Cancels a live job in any state, with every group's delivery of it
    /// (a job handed to its groups has ended: then its live deliveries are
    /// what is cancelled, and the job is returned as deleted).
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` naming the state
    /// of an ended one that has no live delivery.
    #[instrument(level = "debug", skip(self))]
    pub async fn delete(&self, id: &JobId) -> QueueResult<Job> {
        match self.delete_one(id).await {
            Ok(job) => {
                if self.groups().await.contains_key(&job.topic) {
                    // A fan-out under way may have created some of them.
                    self.delete_deliveries(id).await?;
                }
                Ok(job)
            }
            Err(QueueError::WrongState { id: ended, state }) => {
                if id.group_parts().is_none() && self.delete_deliveries(id).await? > 0 {
                    let mut job = self.store.get(id).await?.ok_or_else(|| QueueError::NotFound(id.clone()))?;
                    job.state = JobState::Deleted;
                    return Ok(job);
                }
                Err(QueueError::WrongState { id: ended, state })
            }
            Err(error) => Err(error),
        }
    }

    /// Cancels one live job (or delivery) in any state.
    async fn delete_one(&self, id: &JobId) -> QueueResult<Job> {
        let _id_guard = self.id_locks.lock(id).await;
        let _transition = self.transitions.read().await;
        let mut job = match self.scheduler.get(id).await? {
            Some(job) => job,
            // The scheduler may have lost it (restart, outage): the store decides.
            None => self.stored_live_job(id).await?,
        };
        let now = Timestamp::now();
        job.state = JobState::Deleted;
        job.updated_at = now;
        self.store.record(vec![StateChange::of(&job, now)]).await?;
        self.forget_in_scheduler(id).await?;
        queue_metrics::record_delete();
        self.consumers.released(id);
        Ok(job)
    }

    /// Runs one timer round at `now` and journals what changed.
    ///
    /// While the journal is full the round is skipped with the store's
    /// unavailable error; the timer tries again after its pause.
    pub async fn promote_due(&self, now: Timestamp) -> QueueResult<Promotion> {
        self.store.check_journal_room()?;
        let _transition = self.transitions.read().await;
        let promotion = self.scheduler.promote_due(now, self.settings.promote_batch).await?;
        if !promotion.changed.is_empty() {
            queue_metrics::record_promotion(&promotion.changed);
            let dead = promotion.changed.iter().filter(|job| job.state == JobState::Dead).count();
            self.activity.record(ActivityEvent::Dead, dead as u64);
            self.store.journal(promotion.changed.iter().map(|job| StateChange::of(job, now)).collect());
        }
        Ok(promotion)
    }

    /// Returns the topics that have ready jobs (the forwarder's work list).
    pub async fn ready_topics(&self) -> QueueResult<Vec<Topic>> {
        let live = self.scheduler.stats().await?;
        Ok(live.into_iter().filter(|topic| topic.ready > 0).map(|topic| topic.topic).collect())
    }

    /// Checks each backend; returns the name and outcome of each.
    pub async fn check_backends(&self) -> Vec<(&'static str, QueueResult<()>)> {
        let scheduler = self.scheduler.ping().await;
        let store = self.store.ping().await.map_err(QueueError::from);
        vec![(self.scheduler.backend(), scheduler), (self.store.backend(), store)]
    }

    /// Flushes the journal and closes the store.
    pub async fn close(&self) {
        self.store.close().await;
    }

    /// Returns the live job and whether the scheduler holds it. A job the
    /// scheduler lost (restart, outage) is answered from the store, after the
    /// journal is flushed so that this node's pops are in it.
    async fn live_job_or_stored(&self, id: &JobId) -> QueueResult<(Job, bool)> {
        if let Some(job) = self.scheduler.get(id).await? {
            return Ok((job, true));
        }
        self.store.flush().await?;
        Ok((self.stored_live_job(id).await?, false))
    }

    /// Returns the job from the store when it is live.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` naming the state of an ended one.
    async fn stored_live_job(&self, id: &JobId) -> QueueResult<Job> {
        match self.store.get(id).await? {
            Some(job) if job.state.is_live() => Ok(job),
            Some(ended) => Err(QueueError::WrongState { id: id.clone(), state: ended.state }),
            None => Err(QueueError::NotFound(id.clone())),
        }
    }

    async fn forget_in_scheduler(&self, id: &JobId) -> QueueResult<()> {
        match self.scheduler.delete(id).await {
            Ok(_) | Err(QueueError::NotFound(_)) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

fn require_reserved(job: &Job) -> QueueResult<()> {
    if job.state == JobState::Reserved {
        Ok(())
    } else {
        Err(QueueError::WrongState { id: job.id.clone(), state: job.state })
    }
}

/// Returns the job as a nack at `now` with `delay` leaves it.
fn nacked(job: &Job, delay: Duration, now: Timestamp) -> Job {
    let mut next = job.clone();
    next.updated_at = now;
    if !job.has_retries_left() {
        next.state = JobState::Dead;
        return next;
    }
    next.attempt += 1;
    next.run_at = now.plus(delay);
    next.state = crate::scheduler::waiting_state(next.run_at, now);
    next
}
