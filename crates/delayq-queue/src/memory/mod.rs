//! The in-process scheduler backend, for the embedded single node.
//!
//! All state sits behind one std [`Mutex`]: every operation is a short
//! critical section (O(log n) map updates) that never spans an `.await`, which
//! is also what makes each operation atomic with respect to every other.
//!
//! - Jobs live in a slab, found by id through a hash table; the indexes below
//!   hold slot numbers, so a transition updates small keys in place and never
//!   moves a job (`state`).
//! - A slot keeps only what orders a job, hands it out and moves it through
//!   its states, not its body or the rest of its payload: memory grows with
//!   the jobs held, not with their size. The jobs it returns carry no payload
//!   ([`Scheduler::holds_payloads`]); the service reads it from the store.
//! - The timeline is one ordered map of `(instant, seq)` holding, for each job,
//!   its single pending instant: `run_at` while delayed, the ttl expiry while
//!   ready, the ttr deadline while reserved. Entries are removed eagerly when
//!   a job moves, so the timeline never holds stale instants.
//! - Each topic has a ready queue ordered by `(priority, run_at, seq)` and a
//!   [`Notify`] raised once per job made ready; long-polling consumers register
//!   on it before looking, so no wakeup is lost, and a consumer that leaves
//!   ready jobs behind passes the signal on (`topic`).
//! - The timer's [`Notify`] is raised when an instant earlier than every
//!   other one is filed, so the timer never sleeps past something due.
//!
//! Signals are raised after the lock is released. `restore` never adds an
//! ended job; a `reserve` may still hand out a ready job whose ttl passed but
//! that the timer has not expired yet.

mod entry;
mod state;
mod topic;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use delayq_common::{Clock, Job, JobId, Timestamp, Topic};
use tokio::sync::Notify;
use tokio::time::Instant;

use self::state::MemoryState;
use crate::error::QueueResult;
use crate::scheduler::{HorizonMarks, Promotion, RestoreFence, Scheduler, TopicStats};

/// The longest a reserve waits when asked for an unrepresentable wait.
const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// The in-process scheduler.
pub struct MemoryScheduler {
    state: Mutex<MemoryState>,
    /// Raised when something is due sooner than the timer may think.
    timer: Arc<Notify>,
    /// What "now" is when a job is filed, reserved, nacked or touched.
    clock: Clock,
}

impl MemoryScheduler {
    /// Creates an empty scheduler on the system clock.
    pub fn new() -> MemoryScheduler {
        MemoryScheduler::with_clock(Clock::system())
    }

    /// Creates an empty scheduler that reads the time from `clock`.
    pub fn with_clock(clock: Clock) -> MemoryScheduler {
        MemoryScheduler { state: Mutex::new(MemoryState::default()), timer: Arc::new(Notify::new()), clock }
    }

    /// Runs `operation` under the lock, then raises the signals it asked for.
    fn with_state<T>(&self, operation: impl FnOnce(&mut MemoryState) -> T) -> T {
        let (outcome, wakes) = {
            let mut state = self.lock();
            let outcome = operation(&mut state);
            (outcome, state.take_wakes())
        };
        if wakes.timer {
            self.timer.notify_one();
        }
        for signal in wakes.topics {
            signal.notify_one();
        }
        outcome
    }

    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        // A panic while the lock was held (a bug) should not turn every later
        // call into a panic too; the state's maps stay usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for MemoryScheduler {
    fn default() -> MemoryScheduler {
        MemoryScheduler::new()
    }
}

/// Holds a topic's ready signal while a consumer waits, and gives it back on
/// every exit path (including cancellation) so unused topics are forgotten.
struct Waiter<'a> {
    scheduler: &'a MemoryScheduler,
    topic: &'a Topic,
    signal: Arc<Notify>,
}

impl<'a> Waiter<'a> {
    fn new(scheduler: &'a MemoryScheduler, topic: &'a Topic) -> Waiter<'a> {
        let signal = scheduler.lock().wait_on(topic);
        Waiter { scheduler, topic, signal }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.scheduler.lock().stop_waiting(self.topic);
    }
}

#[async_trait]
impl Scheduler for MemoryScheduler {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn holds_payloads(&self) -> bool {
        false
    }

    async fn schedule(&self, job: &Job) -> QueueResult<()> {
        let now = self.clock.now();
        self.with_state(|state| state.schedule(job, now))
    }

    async fn schedule_batch(&self, jobs: &[Job]) -> QueueResult<Vec<QueueResult<()>>> {
        let now = self.clock.now();
        Ok(self.with_state(|state| jobs.iter().map(|job| state.schedule(job, now)).collect()))
    }

    async fn restore(&self, job: &Job) -> QueueResult<bool> {
        let now = self.clock.now();
        Ok(self.with_state(|state| state.restore(job, now)))
    }

    async fn restore_batch(&self, jobs: &[Job], _fence: &RestoreFence) -> QueueResult<Vec<bool>> {
        let now = self.clock.now();
        Ok(self.with_state(|state| jobs.iter().map(|job| state.restore(job, now)).collect()))
    }

    async fn admit_until(&self, until: Timestamp) -> QueueResult<Option<Timestamp>> {
        Ok(self.lock().admit_until(until))
    }

    async fn mark_loaded(&self, until: Timestamp) -> QueueResult<()> {
        self.lock().mark_loaded(until);
        Ok(())
    }

    async fn horizon(&self) -> QueueResult<Option<HorizonMarks>> {
        Ok(self.lock().horizon())
    }

    async fn replace(&self, job: &Job) -> QueueResult<Job> {
        let now = self.clock.now();
        self.with_state(|state| state.replace(job, now))
    }

    async fn reserve(&self, topic: &Topic, count: usize, wait: Duration) -> QueueResult<Vec<Job>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let start = Instant::now();
        let deadline = start.checked_add(wait).unwrap_or(start + MAX_WAIT);
        let waiter = Waiter::new(self, topic);
        loop {
            // Listen before looking, so a job made ready in between is not missed.
            let ready = waiter.signal.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let (jobs, more_ready) = self.with_state(|state| {
                let jobs = state.reserve(topic, count, self.clock.now());
                (jobs, state.has_ready(topic))
            });
            if !jobs.is_empty() || Instant::now() >= deadline {
                if more_ready {
                    // A signal this call consumed may have been meant for another waiter.
                    waiter.signal.notify_one();
                }
                return Ok(jobs);
            }
            // On timeout, loop once more: the final look happens at the top.
            let _ = tokio::time::timeout_at(deadline, ready).await;
        }
    }

    async fn finish(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        self.with_state(|state| state.finish(id, attempt))
    }

    async fn nack(&self, id: &JobId, attempt: Option<u32>, delay: Duration) -> QueueResult<Job> {
        let now = self.clock.now();
        self.with_state(|state| state.nack(id, attempt, delay, now))
    }

    async fn touch(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        let now = self.clock.now();
        self.with_state(|state| state.touch(id, attempt, now))
    }

    async fn delete(&self, id: &JobId) -> QueueResult<Job> {
        self.with_state(|state| state.delete(id))
    }

    async fn get(&self, id: &JobId) -> QueueResult<Option<Job>> {
        Ok(self.lock().get(id))
    }

    async fn promote_due(&self, now: Timestamp, max_batch: usize) -> QueueResult<Promotion> {
        Ok(self.with_state(|state| state.promote(now, max_batch)))
    }

    fn wakeup(&self) -> Arc<Notify> {
        Arc::clone(&self.timer)
    }

    async fn stats(&self) -> QueueResult<Vec<TopicStats>> {
        Ok(self.lock().stats())
    }

    async fn clear(&self) -> QueueResult<u64> {
        Ok(self.with_state(MemoryState::clear))
    }

    async fn ping(&self) -> QueueResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
