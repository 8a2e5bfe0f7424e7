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
//! operations on one job; `push` the single push and replace, `batch` the batch
//! push's pipeline, `payloads` the reads of popped jobs' payloads, `restore`
//! restore, reconciliation and clearAll.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{
    InvalidField, Job, JobDefaults, JobId, JobState, Limits, PushRequest, RetryPolicy, Snowflake, Timestamp, Topic,
};
use delayq_store::{bucket_end, due_bucket, DueCursor, JobStore, ListCursor, LogEntry, StateChange, StateCount};
use futures::stream::{FuturesOrdered, StreamExt};
use tokio::sync::{mpsc, Mutex, RwLock, RwLockWriteGuard, Semaphore};
use tracing::{info, instrument, warn};

use self::payloads::{PayloadStore, Payloads};
use crate::combine::Combiner;
use crate::error::{QueueError, QueueResult};
use crate::failpoint;
use crate::horizon::{HorizonStatus, HORIZON_OFF};
use crate::id_locks::IdLocks;
use crate::metrics as queue_metrics;
use crate::scheduler::{check_attempt, HorizonMarks, Promotion, Scheduler, TopicStats};

mod batch;
mod payloads;
mod push;
mod restore;

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
}

/// A count of the store that took this long or longer is reused for a while.
const SLOW_COUNT: Duration = Duration::from_millis(500);
/// How many times the time a slow count took it is reused for.
const SLOW_COUNT_REUSE: u32 = 10;

/// The last count of the store, when it was taken, and how long it took.
struct StoredCounts {
    counts: Vec<StateCount>,
    at: tokio::time::Instant,
    took: Duration,
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
        }
    }
}

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
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPage {
    /// The jobs, oldest due first.
    pub jobs: Vec<Job>,
    /// Where the next page starts, when this one was full.
    pub next: Option<ListCursor>,
}

/// Counts for `/stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStats {
    /// Live jobs per topic, from the scheduler; with a horizon, the jobs only
    /// the store holds (due beyond it) are counted as delayed too.
    pub live: Vec<TopicStats>,
    /// Jobs per topic and state, from the store.
    pub stored: Vec<StateCount>,
    /// The scheduler backend.
    pub scheduler: &'static str,
    /// The store backend.
    pub store: &'static str,
    /// Where the horizon stands, when there is one (or the scheduler still has marks of one).
    pub horizon: Option<HorizonStats>,
}

/// Where the horizon stands, for `/stats` and `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HorizonStats {
    /// The span the leader loads ahead now (shrunk under memory pressure),
    /// as this node knows it; `None` when the horizon is off here.
    pub span: Option<Duration>,
    /// Pushes due by this instant are scheduled at once.
    pub admitted_until: Timestamp,
    /// Every live job due by this instant is in the scheduler; `None` until the first load.
    pub loaded_until: Option<Timestamp>,
    /// Live jobs the scheduler holds.
    pub hot: u64,
    /// Live jobs only the store holds (due beyond the loaded mark).
    pub cold: u64,
    /// How far the loaded mark is behind `now + span`: more than a loader
    /// step means the loader falls behind.
    pub lag: Duration,
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
        }
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

    /// Reserves up to `count` ready jobs of `topic`, waiting up to `wait` for the first.
    ///
    /// # Errors
    /// [`QueueError::Busy`] when `wait` is not zero and as many pops as
    /// [`QueueSettings::max_waiters`] are waiting already.
    #[instrument(skip(self))]
    pub async fn pop(&self, topic: &Topic, count: usize, wait: Duration) -> QueueResult<Vec<Job>> {
        // A pop journals what it reserves: while the database does not take
        // the journal, refuse rather than let it grow.
        self.store.check_journal_room()?;
        let count = count.clamp(1, MAX_POP_COUNT);
        let _waiting = if wait.is_zero() {
            None
        } else {
            let permit =
                self.waiters.try_acquire().map_err(|_| QueueError::Busy { limit: self.settings.max_waiters })?;
            Some(permit)
        };
        let jobs = self.scheduler.reserve(topic, count, wait.min(MAX_POP_WAIT)).await?;
        if jobs.is_empty() {
            return Ok(jobs);
        }
        let now = Timestamp::now();
        for job in &jobs {
            queue_metrics::record_delivery(job.run_at, now);
        }
        self.store.journal(jobs.iter().map(|job| StateChange::of(job, now)).collect());
        if self.scheduler.holds_payloads() {
            Ok(jobs)
        } else {
            self.with_payloads(jobs).await
        }
    }

    /// Returns the reserved jobs with their payloads, read from the store
    /// (for a scheduler that does not hold them), in the same order. The store
    /// has every job the scheduler holds (it is written first); one it lacks
    /// was never acknowledged to anyone, and is taken out and not delivered.
    ///
    /// Under the payload locks of the jobs, so that a replace refused because
    /// the job was reserved meanwhile has put the old payload back first.
    async fn with_payloads(&self, reserved: Vec<Job>) -> QueueResult<Vec<Job>> {
        let ids: Vec<JobId> = reserved.iter().map(|job| job.id.clone()).collect();
        let stored = {
            let _payloads = self.payload_locks.lock_all(&ids).await;
            self.payloads.call(ids).await?
        };
        let mut whole = Vec::with_capacity(reserved.len());
        for (job, stored) in reserved.into_iter().zip(stored) {
            match stored {
                Some(row) => whole.push(row.with_live_state(&job)),
                None => {
                    warn!(job_id = %job.id, "a reserved job has no row in the store; it is not delivered");
                    self.forget_in_scheduler(&job.id).await?;
                }
            }
        }
        Ok(whole)
    }

    /// Acknowledges a reserved job, storing the consumer's result. With
    /// `attempt`, only that delivery of it.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` when it is not
    /// reserved (an ended job names its state); `StaleAttempt` when `attempt`
    /// is not its current delivery.
    #[instrument(skip(self, result))]
    pub async fn finish(&self, id: &JobId, attempt: Option<u32>, result: Option<String>) -> QueueResult<Job> {
        let _id_guard = self.id_locks.lock(id).await;
        let _transition = self.transitions.read().await;
        let (mut job, _held) = self.live_job_or_stored(id).await?;
        require_reserved(&job)?;
        check_attempt(&job, attempt)?;
        let now = Timestamp::now();
        job.state = JobState::Finished;
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
        queue_metrics::record_finish();
        Ok(job)
    }

    /// Gives a reserved job back for a retry after `delay` (or its backoff).
    /// With `attempt`, only that delivery of it (errors as [`DelayQueue::finish`]).
    #[instrument(skip(self))]
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
    #[instrument(skip(self))]
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

    /// Cancels a live job in any state.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` naming the state of an ended one.
    #[instrument(skip(self))]
    pub async fn delete(&self, id: &JobId) -> QueueResult<Job> {
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
        Ok(job)
    }

    /// Returns the id of the live job of `topic` with business key `biz_key`.
    pub async fn resolve_biz_key(&self, topic: &Topic, biz_key: &str) -> QueueResult<JobId> {
        match self.store.find_live_by_biz_key(topic, biz_key).await? {
            Some(job) => Ok(job.id),
            None => Err(QueueError::BizKeyNotFound { topic: topic.clone(), biz_key: biz_key.to_owned() }),
        }
    }

    /// Returns a job in any state with the newest [`DEFAULT_HISTORY_LIMIT`] lines of its history.
    pub async fn get(&self, id: &JobId) -> QueueResult<JobDetails> {
        self.get_with_history(id, DEFAULT_HISTORY_LIMIT).await
    }

    /// Returns a job in any state with the newest `history_limit` lines of its
    /// history (at most [`MAX_HISTORY_LIMIT`]), oldest first.
    pub async fn get_with_history(&self, id: &JobId, history_limit: usize) -> QueueResult<JobDetails> {
        let Some(mut job) = self.store.get(id).await? else {
            return Err(QueueError::NotFound(id.clone()));
        };
        if job.state.is_live() {
            // The scheduler is ahead of the background journal.
            if let Ok(Some(live)) = self.scheduler.get(id).await {
                job = job.with_live_state(&live);
            }
        }
        let history = self.store.history(id, history_limit.min(MAX_HISTORY_LIMIT)).await?;
        Ok(JobDetails { job, history })
    }

    /// Lists a topic's jobs in a state, oldest due first.
    pub async fn list(
        &self,
        topic: &Topic,
        state: JobState,
        limit: usize,
        cursor: Option<ListCursor>,
    ) -> QueueResult<JobPage> {
        self.store.flush().await?;
        let jobs = self.store.list(topic, state, limit, cursor.as_ref()).await?;
        let next = (jobs.len() == limit)
            .then(|| jobs.last().map(|last| ListCursor { run_at: last.run_at, id: last.id.clone() }))
            .flatten();
        Ok(JobPage { jobs, next })
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
            self.store.journal(promotion.changed.iter().map(|job| StateChange::of(job, now)).collect());
        }
        Ok(promotion)
    }

    /// Returns the counts for `/stats`: live jobs from the scheduler, jobs per
    /// state from the store (whose cost does not grow with ended jobs, see
    /// [`JobStore::counts`], and which is reused for a while when it is slow,
    /// see [`DelayQueue::store_counts`]).
    pub async fn stats(&self) -> QueueResult<QueueStats> {
        let mut live = self.scheduler.stats().await?;
        let stored = self.store_counts().await?;
        let horizon = match self.scheduler.horizon().await? {
            Some(marks) => {
                let hot = live.iter().map(|topic| topic.delay + topic.ready + topic.reserved).sum();
                let cold = count_cold_as_delayed(&mut live, &stored);
                Some(self.horizon_stats(marks, hot, cold))
            }
            None => None,
        };
        Ok(QueueStats { live, stored, scheduler: self.scheduler.backend(), store: self.store.backend(), horizon })
    }

    /// Returns the store's counts. The live jobs are counted from an index,
    /// a cost that grows with them: a count that took [`SLOW_COUNT`] or more is
    /// reused for [`SLOW_COUNT_REUSE`] times as long, so that `/stats` and
    /// `/metrics` keep the database at most about a tenth busy however often
    /// they are called. Callers during a count wait for it and share it.
    async fn store_counts(&self) -> QueueResult<Vec<StateCount>> {
        let mut last = self.stored_counts.lock().await;
        if let Some(last) = last.as_ref() {
            if last.took >= SLOW_COUNT && last.at.elapsed() < last.took * SLOW_COUNT_REUSE {
                return Ok(last.counts.clone());
            }
        }
        let started = tokio::time::Instant::now();
        let counts = self.store.counts().await?;
        *last = Some(StoredCounts { counts: counts.clone(), at: tokio::time::Instant::now(), took: started.elapsed() });
        Ok(counts)
    }

    fn horizon_stats(&self, marks: HorizonMarks, hot: u64, cold: u64) -> HorizonStats {
        let span = self.horizon_span();
        let lag = match (span, marks.loaded) {
            (Some(span), Some(loaded)) => Timestamp::now().plus(span).since(loaded),
            (Some(span), None) => span,
            (None, _) => Duration::ZERO,
        };
        HorizonStats { span, admitted_until: marks.admit, loaded_until: marks.loaded, hot, cold, lag }
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

    /// Returns a job the scheduler holds with its payload: as it is, from a
    /// scheduler that holds payloads, else with the store's.
    async fn with_payload(&self, held: Job) -> QueueResult<Job> {
        if self.scheduler.holds_payloads() {
            return Ok(held);
        }
        match self.store.get(&held.id).await? {
            Some(stored) => Ok(stored.with_live_state(&held)),
            None => Err(QueueError::NotFound(held.id)),
        }
    }

    /// Returns what the store should hold after a write the scheduler refused:
    /// the job as the scheduler holds it now (`current`), with the payload it
    /// has, or, from a scheduler that holds none, the payload of `before`
    /// (the job as the store held it before the write).
    fn as_scheduled(&self, before: &Job, current: Job) -> Job {
        if self.scheduler.holds_payloads() {
            current
        } else {
            before.clone().with_live_state(&current)
        }
    }

    async fn forget_in_scheduler(&self, id: &JobId) -> QueueResult<()> {
        match self.scheduler.delete(id).await {
            Ok(_) | Err(QueueError::NotFound(_)) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// Adds to each topic's delayed count its jobs beyond the horizon: the live
/// jobs of the store the scheduler does not hold. Returns how many it added.
fn count_cold_as_delayed(live: &mut Vec<TopicStats>, stored: &[StateCount]) -> u64 {
    let mut stored_live: std::collections::BTreeMap<&Topic, u64> = std::collections::BTreeMap::new();
    for count in stored.iter().filter(|count| count.state.is_live()) {
        *stored_live.entry(&count.topic).or_default() += count.count;
    }
    let mut cold = 0;
    for (topic, in_store) in stored_live {
        match live.iter_mut().find(|held| held.topic == *topic) {
            Some(held) => {
                let beyond = in_store.saturating_sub(held.delay + held.ready + held.reserved);
                held.delay += beyond;
                cold += beyond;
            }
            None => {
                live.push(TopicStats { topic: topic.clone(), delay: in_store, ready: 0, reserved: 0 });
                cold += in_store;
            }
        }
    }
    cold
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
