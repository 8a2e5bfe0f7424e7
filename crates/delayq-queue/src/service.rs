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

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{
    InvalidField, Job, JobDefaults, JobId, JobState, Limits, PushRequest, RetryPolicy, Snowflake, Timestamp, Topic,
};
use delayq_store::{JobStore, ListCursor, LogEntry, StateChange, StateCount};
use futures::stream::{FuturesOrdered, StreamExt};
use tokio::sync::{mpsc, RwLock, RwLockWriteGuard, Semaphore};
use tracing::{info, instrument, warn};

use crate::error::{QueueError, QueueResult};
use crate::failpoint;
use crate::id_locks::IdLocks;
use crate::metrics as queue_metrics;
use crate::scheduler::{check_attempt, Promotion, Scheduler, TopicStats};

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
/// Jobs per store write of a batch push: the next slice is written to the
/// store while the previous one is scheduled. 256 is the largest multi-row
/// insert of the SQL stores, so a full slice is one statement.
const PIPELINE_SLICE: usize = 256;

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
    /// Live jobs per topic, from the scheduler.
    pub live: Vec<TopicStats>,
    /// Jobs per topic and state, from the store.
    pub stored: Vec<StateCount>,
    /// The scheduler backend.
    pub scheduler: &'static str,
    /// The store backend.
    pub store: &'static str,
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
    /// Held shared by every push across its store and scheduler writes, and
    /// exclusively by clearAll: a push is either wholly before the clear (and
    /// cleared) or wholly after it (and kept), never stored live and then
    /// taken out of the scheduler.
    pushes: RwLock<()>,
    /// One permit per pop waiting for jobs.
    waiters: Semaphore,
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
        DelayQueue {
            scheduler,
            store,
            ids,
            settings,
            transitions: RwLock::new(()),
            id_locks: IdLocks::new(),
            pushes: RwLock::new(()),
            waiters,
        }
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

    /// Adds one job, or updates a waiting one when the push says `replace`.
    ///
    /// The job is durable in the store before this returns `Ok`.
    #[instrument(skip_all, fields(topic = %request.topic))]
    pub async fn push(&self, request: PushRequest) -> QueueResult<Pushed> {
        let now = Timestamp::now();
        let _pushing = self.pushes.read().await;
        self.push_one(request, now).await
    }

    /// Pushes one job under its id's lock (the caller holds [`DelayQueue::pushes`]).
    async fn push_one(&self, request: PushRequest, now: Timestamp) -> QueueResult<Pushed> {
        if request.replace {
            if let Some(target) = self.find_replace_target(&request).await? {
                let _id_guard = self.id_locks.lock_all(request.id.iter().chain([&target.id])).await;
                // Read again under the lock: a finish, delete or replace may have moved it meanwhile.
                return match self.find_replace_target(&request).await? {
                    Some(existing) => self.replace(existing, request, now).await,
                    None => self.insert_and_schedule(request, now).await,
                };
            }
        }
        let _id_guard = match &request.id {
            Some(id) => Some(self.id_locks.lock(id).await),
            None => None,
        };
        self.insert_and_schedule(request, now).await
    }

    /// Stores a new job, then schedules it.
    async fn insert_and_schedule(&self, request: PushRequest, now: Timestamp) -> QueueResult<Pushed> {
        let job = self.new_job(request, now)?;
        let pushed = Pushed { id: job.id.clone(), run_at: job.run_at };
        let mut outcomes = self.store.insert(vec![job.clone()]).await?;
        if let Some(Err(refused)) = outcomes.pop() {
            return Err(refused.into());
        }
        failpoint::crash_if_armed(failpoint::PUSH_AFTER_STORE);
        let scheduled = self.scheduler.schedule(&job).await;
        self.settle_schedule(&job, scheduled).await?;
        queue_metrics::record_pushes(1);
        Ok(pushed)
    }

    /// Settles the scheduler's answer to a stored job. A conflict means the
    /// scheduler holds a job under this id although the store just took the
    /// new one, so no live job had it: either this very job (restore found it
    /// in the store first) or an earlier job of the same id that ended in the
    /// store but not in the scheduler (its scheduler write failed). The
    /// earlier one gives way, so that every acknowledged push is delivered.
    async fn settle_schedule(&self, job: &Job, scheduled: QueueResult<()>) -> QueueResult<()> {
        match scheduled {
            Err(QueueError::Conflict(_)) => {}
            other => return other,
        }
        if let Some(held) = self.scheduler.get(&job.id).await? {
            if held.create_time == job.create_time && held.topic == job.topic && held.body == job.body {
                return Ok(());
            }
            warn!(job_id = %job.id, "an ended job of the same id was still scheduled; the new push replaces it");
            self.forget_in_scheduler(&job.id).await?;
        }
        match self.scheduler.schedule(job).await {
            // Restore scheduled it meanwhile.
            Ok(()) | Err(QueueError::Conflict(_)) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Adds several jobs, each judged alone, in store commits of up to
    /// [`PIPELINE_SLICE`] jobs, each scheduled while the next is written.
    ///
    /// # Errors
    /// The outer error only when no job could be written at all.
    #[instrument(skip_all, fields(jobs = requests.len()))]
    pub async fn push_batch(
        &self,
        requests: Vec<Result<PushRequest, InvalidField>>,
    ) -> QueueResult<Vec<QueueResult<Pushed>>> {
        let now = Timestamp::now();
        let _pushing = self.pushes.read().await;
        let mut outcomes: Vec<QueueResult<Pushed>> = Vec::with_capacity(requests.len());
        let mut jobs = Vec::new();
        let mut slots = Vec::new();
        let mut named_ids = Vec::new();
        for request in requests {
            let request = match request {
                Ok(request) => request,
                Err(invalid) => {
                    outcomes.push(Err(invalid.into()));
                    continue;
                }
            };
            if request.replace {
                // A replace needs its own read-check-write (and its own id
                // lock, taken before the batch takes the others'); it is rare in batches.
                outcomes.push(self.push_one(request, now).await);
                continue;
            }
            if let Some(id) = &request.id {
                named_ids.push(id.clone());
            }
            match self.new_job(request, now) {
                Ok(job) => {
                    slots.push(outcomes.len());
                    outcomes.push(Ok(Pushed { id: job.id.clone(), run_at: job.run_at }));
                    jobs.push(job);
                }
                Err(error) => outcomes.push(Err(error)),
            }
        }
        if jobs.is_empty() {
            return Ok(outcomes);
        }
        let _id_guard = self.id_locks.lock_all(&named_ids).await;
        // Slices go to the store one after the other, and each is scheduled as
        // soon as it is stored, while the next ones are written and while the
        // slices before it may still be in the scheduler: the backends work side
        // by side, and the scheduler does not wait for the answer to one slice's
        // call to get the next (docs/performance.md measures it against one
        // call in flight at a time).
        let slices: Vec<(&[Job], &[usize])> = jobs.chunks(PIPELINE_SLICE).zip(slots.chunks(PIPELINE_SLICE)).collect();
        let schedule_failed = AtomicBool::new(false);
        let (stored_tx, stored_rx) = mpsc::unbounded_channel();
        let (stored, scheduled) = futures::future::join(
            self.store_slices(&slices, &schedule_failed, stored_tx),
            self.schedule_slices(stored_rx, &schedule_failed),
        )
        .await;
        let mut pushed = 0;
        let mut failure: Option<QueueError> = None;
        for (slot, refused) in stored.refused {
            set_outcome(&mut outcomes, slot, Err(refused));
        }
        let mut unscheduled: Vec<usize> = Vec::new();
        for (accepted_slots, result) in scheduled {
            match result {
                Some(Ok(scheduled)) => {
                    for (slot, outcome) in accepted_slots.into_iter().zip(scheduled) {
                        let outcome = match outcome {
                            Err(QueueError::Conflict(_)) => match jobs.get(slot_job(&slots, slot)) {
                                Some(job) => self.settle_schedule(job, outcome).await,
                                None => outcome,
                            },
                            other => other,
                        };
                        match outcome {
                            Ok(()) => pushed += 1,
                            Err(error) => set_outcome(&mut outcomes, slot, Err(error)),
                        }
                    }
                }
                Some(Err(error)) => {
                    fail_slots(&mut outcomes, &accepted_slots, &error);
                    failure.get_or_insert(error);
                }
                // Stored after the scheduler failed, and not tried there: they
                // are stored; reconciliation schedules them.
                None => unscheduled.extend(accepted_slots),
            }
        }
        if let Some((error, failed_slots)) = stored.failure {
            fail_slots(&mut outcomes, &failed_slots, &error);
            failure.get_or_insert(error);
        }
        if let Some(error) = failure {
            fail_slots(&mut outcomes, &unscheduled, &error);
            // Slices never tried share the failure that stopped the batch.
            for (_, slice_slots) in slices.get(stored.tried..).unwrap_or_default() {
                fail_slots(&mut outcomes, slice_slots, &error);
            }
            if pushed == 0 {
                return Err(error);
            }
        }
        queue_metrics::record_pushes(pushed);
        Ok(outcomes)
    }

    /// Writes `slices` to the store in order and sends each one's accepted jobs
    /// on to be scheduled; stops at a store failure, or before the next slice
    /// once the scheduler has failed.
    async fn store_slices<'j>(
        &self,
        slices: &[(&'j [Job], &'j [usize])],
        schedule_failed: &AtomicBool,
        stored_tx: mpsc::UnboundedSender<StoredSlice<'j>>,
    ) -> StoreSteps {
        let mut steps = StoreSteps { refused: Vec::new(), failure: None, tried: 0 };
        for &(slice, slice_slots) in slices {
            if schedule_failed.load(Ordering::Acquire) {
                break;
            }
            steps.tried += 1;
            let stored = match self.store.insert(slice.to_vec()).await {
                Ok(stored) => stored,
                Err(error) => {
                    steps.failure = Some((QueueError::from(error), slice_slots.to_vec()));
                    break;
                }
            };
            failpoint::crash_if_armed(failpoint::PUSH_AFTER_STORE);
            let accepted = if stored.iter().all(Result::is_ok) {
                (Cow::Borrowed(slice), slice_slots.to_vec())
            } else {
                let mut accepted = Vec::with_capacity(slice.len());
                let mut accepted_slots = Vec::with_capacity(slice.len());
                for ((job, &slot), outcome) in slice.iter().zip(slice_slots).zip(stored) {
                    match outcome {
                        Ok(()) => {
                            accepted.push(job.clone());
                            accepted_slots.push(slot);
                        }
                        Err(refused) => steps.refused.push((slot, refused.into())),
                    }
                }
                (Cow::Owned(accepted), accepted_slots)
            };
            if stored_tx.send(accepted).is_err() {
                break;
            }
        }
        steps
    }

    /// Schedules every stored slice as it arrives, several in flight at once;
    /// answers each slice's outcome in the order they were stored (`None`:
    /// not tried, because the scheduler had already failed).
    async fn schedule_slices(
        &self,
        mut stored_rx: mpsc::UnboundedReceiver<StoredSlice<'_>>,
        schedule_failed: &AtomicBool,
    ) -> Vec<(Vec<usize>, Option<QueueResult<Vec<QueueResult<()>>>>)> {
        let mut in_flight = FuturesOrdered::new();
        let mut done = Vec::new();
        let mut receiving = true;
        while receiving || !in_flight.is_empty() {
            tokio::select! {
                next = stored_rx.recv(), if receiving => match next {
                    Some((accepted, accepted_slots)) => {
                        let try_it = !schedule_failed.load(Ordering::Acquire);
                        in_flight.push_back(async move {
                            let outcome = if try_it { Some(self.scheduler.schedule_batch(&accepted).await) } else { None };
                            (accepted_slots, outcome)
                        });
                    }
                    None => receiving = false,
                },
                Some(slice) = in_flight.next(), if !in_flight.is_empty() => {
                    if matches!(slice.1, Some(Err(_))) {
                        schedule_failed.store(true, Ordering::Release);
                    }
                    done.push(slice);
                }
            }
        }
        done
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
        Ok(jobs)
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
                job.state = live.state;
                job.attempt = live.attempt;
                job.run_at = live.run_at;
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

    /// Schedules again every live job of the store; with `skip_overdue`, leaves out
    /// jobs whose due time has passed. Returns how many jobs are scheduled.
    ///
    /// Idempotent: a job the scheduler already holds is left as it is, and a job
    /// that ends (finished, deleted) while restore runs is not brought back.
    #[instrument(skip(self))]
    pub async fn restore(&self, skip_overdue: bool) -> QueueResult<u64> {
        let outcome = self.restore_from_store(skip_overdue).await?;
        if outcome.added > 0 {
            info!(scheduled = outcome.scheduled, added = outcome.added, "restored jobs from the store");
        }
        Ok(outcome.scheduled)
    }

    /// Puts back every live job of the store that the scheduler does not hold
    /// (the store is ahead after a crash between the two writes of an
    /// operation, or after the scheduler lost data); returns how many.
    #[instrument(skip(self))]
    pub async fn reconcile(&self) -> QueueResult<u64> {
        let outcome = self.restore_from_store(false).await?;
        Ok(outcome.added)
    }

    /// Schedules one job again from the store.
    pub async fn restore_job(&self, id: &JobId) -> QueueResult<Job> {
        let _exclusive = self.exclusive_with_journal().await?;
        let fence = self.scheduler.open_restore().await?;
        let Some(job) = self.store.get(id).await? else {
            return Err(QueueError::NotFound(id.clone()));
        };
        if !job.state.is_live() {
            return Err(QueueError::WrongState { id: id.clone(), state: job.state });
        }
        let added = self.scheduler.restore_batch(std::slice::from_ref(&job), &fence).await?;
        if added.first() == Some(&true) {
            // Another node may have ended it meanwhile.
            match self.store.get(id).await? {
                Some(now_stored) if now_stored.state.is_live() => queue_metrics::record_restored(1),
                now_stored => {
                    // It ended while it was being restored.
                    self.forget_in_scheduler(id).await?;
                    let state = now_stored.map_or(JobState::Deleted, |ended| ended.state);
                    return Err(QueueError::WrongState { id: id.clone(), state });
                }
            }
        }
        Ok(job)
    }

    /// Walks the store's live jobs page by page and restores them.
    async fn restore_from_store(&self, skip_overdue: bool) -> QueueResult<Restored> {
        let now = Timestamp::now();
        let batch = self.settings.restore_batch.max(1);
        let mut after: Option<JobId> = None;
        let mut outcome = Restored::default();
        loop {
            let _exclusive = self.exclusive_with_journal().await?;
            // Before the read: the write skips what other nodes end after it.
            let fence = self.scheduler.open_restore().await?;
            let page = self.store.live_jobs(after.as_ref(), batch).await?;
            let Some(last) = page.last() else { break };
            let next_after = last.id.clone();
            let candidates: Vec<Job> = page.into_iter().filter(|job| !(skip_overdue && job.run_at < now)).collect();
            outcome.scheduled += candidates.len() as u64;
            let added_flags = self.scheduler.restore_batch(&candidates, &fence).await?;
            let added: Vec<&Job> =
                candidates.iter().zip(added_flags).filter_map(|(job, added)| added.then_some(job)).collect();
            let ended = self.forget_ended(after.as_ref(), batch, &added).await?;
            let kept = (added.len() - ended) as u64;
            if kept > 0 {
                queue_metrics::record_restored(kept);
            }
            outcome.added += kept;
            after = Some(next_after);
        }
        Ok(outcome)
    }

    /// Takes out of the scheduler the `added` jobs (restored from the page of
    /// live jobs after `after`) that the store no longer calls live: ended in
    /// the store between the page read and the scheduler write without the
    /// scheduler being told (those it was told of, the restore fence kept
    /// out). Returns how many.
    async fn forget_ended(&self, after: Option<&JobId>, batch: usize, added: &[&Job]) -> QueueResult<usize> {
        if added.is_empty() {
            return Ok(0);
        }
        let again = self.store.live_jobs(after, batch).await?;
        let whole_range = again.len() < batch;
        let still_live: std::collections::HashSet<&JobId> = again.iter().map(|job| &job.id).collect();
        let mut ended = 0;
        for job in added {
            if still_live.contains(&job.id) {
                continue;
            }
            let live = if whole_range {
                false
            } else {
                // The page moved on (new jobs in the range): ask for this one.
                self.store.get(&job.id).await?.is_some_and(|stored| stored.state.is_live())
            };
            if !live {
                self.forget_in_scheduler(&job.id).await?;
                ended += 1;
            }
        }
        if ended > 0 {
            info!(ended, "jobs that ended during restore were taken out again");
        }
        Ok(ended)
    }

    /// Takes [`DelayQueue::transitions`] exclusively and flushes the journal:
    /// while the guard lives, the store holds every change this process made
    /// (timer rounds included) and none is under way.
    async fn exclusive_with_journal(&self) -> QueueResult<RwLockWriteGuard<'_, ()>> {
        let exclusive = self.transitions.write().await;
        self.store.flush().await?;
        Ok(exclusive)
    }

    /// Deletes every live job; returns how many there were.
    ///
    /// Pushes of this node wait while it runs; a push of another node that
    /// lands meanwhile is kept, because only the jobs the store ended are
    /// taken out of the scheduler.
    #[instrument(skip(self))]
    pub async fn clear_all(&self) -> QueueResult<u64> {
        let _no_pushes = self.pushes.write().await;
        let _transition = self.transitions.read().await;
        let deleted = self.store.delete_all_live(Timestamp::now()).await?;
        let cleared = self.scheduler.delete_batch(&deleted).await?;
        warn!(deleted = deleted.len(), cleared, "cleared every live job");
        Ok((deleted.len() as u64).max(cleared))
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
    /// [`JobStore::counts`]).
    pub async fn stats(&self) -> QueueResult<QueueStats> {
        let live = self.scheduler.stats().await?;
        let stored = self.store.counts().await?;
        Ok(QueueStats { live, stored, scheduler: self.scheduler.backend(), store: self.store.backend() })
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

    fn new_job(&self, request: PushRequest, now: Timestamp) -> QueueResult<Job> {
        let id = match request.id.clone() {
            Some(id) => id,
            None => JobId::parse(self.ids.next_id().to_string())?,
        };
        Ok(request.into_job(id, now, &self.settings.defaults))
    }

    async fn find_replace_target(&self, request: &PushRequest) -> QueueResult<Option<Job>> {
        if let Some(id) = &request.id {
            if let Some(job) = self.scheduler.get(id).await? {
                return Ok(Some(job));
            }
        }
        if let Some(biz_key) = &request.biz_key {
            return Ok(self.store.find_live_by_biz_key(&request.topic, biz_key).await?);
        }
        Ok(None)
    }

    /// Replaces a waiting job (the caller holds its id's lock).
    async fn replace(&self, existing: Job, request: PushRequest, now: Timestamp) -> QueueResult<Pushed> {
        if !matches!(existing.state, JobState::Delay | JobState::Ready) {
            return Err(QueueError::WrongState { id: existing.id, state: existing.state });
        }
        if existing.topic != request.topic {
            return Err(QueueError::Conflict(format!("job {} belongs to topic {}", existing.id, existing.topic)));
        }
        let mut job = request.into_job(existing.id.clone(), now, &self.settings.defaults);
        job.attempt = existing.attempt;
        self.store.replace(job.clone()).await?;
        let scheduled = match self.scheduler.replace(&job).await {
            Ok(scheduled) => scheduled,
            Err(refused @ (QueueError::WrongState { .. } | QueueError::NotFound(_))) => {
                // A consumer popped it (or the timer ended it) after the check:
                // the store takes back the job the scheduler holds, so the
                // refused replace changes nothing.
                if let Some(current) = self.scheduler.get(&job.id).await? {
                    self.store.replace(current).await?;
                }
                return Err(refused);
            }
            Err(error) => return Err(error),
        };
        queue_metrics::record_pushes(1);
        Ok(Pushed { id: scheduled.id, run_at: scheduled.run_at })
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

/// What one walk over the store's live jobs did.
#[derive(Default)]
struct Restored {
    /// Live jobs considered (the `restored` count of `/reStore`).
    scheduled: u64,
    /// Jobs the scheduler did not hold and now does.
    added: u64,
}

/// A stored slice on its way to the scheduler: the jobs the store accepted and their slots.
type StoredSlice<'j> = (Cow<'j, [Job]>, Vec<usize>);

/// What writing a batch's slices to the store gave.
struct StoreSteps {
    /// Jobs the store refused, with their slots.
    refused: Vec<(usize, QueueError)>,
    /// The failure that stopped the writing, and the slots of the slice it failed.
    failure: Option<(QueueError, Vec<usize>)>,
    /// How many slices were tried (stored or failed).
    tried: usize,
}

/// Returns the index among a batch's jobs of the job whose outcome is at
/// `slot` (`slots` holds each job's outcome slot, in increasing order).
fn slot_job(slots: &[usize], slot: usize) -> usize {
    slots.binary_search(&slot).unwrap_or(usize::MAX)
}

/// Gives each job of a batch at `slots` its own copy of the failure that kept it out.
fn fail_slots(outcomes: &mut [QueueResult<Pushed>], slots: &[usize], error: &QueueError) {
    for &slot in slots {
        set_outcome(outcomes, slot, Err(error.unavailable_copy()));
    }
}

/// Sets the outcome of the batch entry at `slot` (slots are positions in the batch).
fn set_outcome(outcomes: &mut [QueueResult<Pushed>], slot: usize, outcome: QueueResult<Pushed>) {
    if let Some(place) = outcomes.get_mut(slot) {
        *place = outcome;
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
