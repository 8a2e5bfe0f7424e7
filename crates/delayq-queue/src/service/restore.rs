//! Restore from the store (all live jobs, or one), reconciliation, and clearAll.

use super::*;
use crate::scheduler::RestoreFence;

impl DelayQueue {
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

    /// Walks the store's live jobs page by page and restores them: those due
    /// within the horizon (every one when there is none), and every ready or
    /// reserved one, whose due time has passed.
    async fn restore_from_store(&self, skip_overdue: bool) -> QueueResult<Restored> {
        let _loading = self.loading.lock().await;
        let window = self.open_horizon(Timestamp::now()).await?;
        let outcome = self.restore_range(DueCursor::start(), due_bucket(window.until), skip_overdue).await?;
        self.close_horizon(&window).await?;
        Ok(outcome)
    }

    /// Moves the horizon up to `until`, rounded up to the end of its due-time
    /// bucket ([`due_bucket`]; see [`crate::horizon`]): raises the scheduler's
    /// admission mark, so that pushes due by then are scheduled at once, then
    /// restores the live jobs of the store due after the loaded mark and by
    /// then, and raises the loaded mark. Returns how many jobs the scheduler
    /// did not hold and now does.
    pub async fn load_horizon(&self, until: Timestamp) -> QueueResult<u64> {
        let _loading = self.loading.lock().await;
        let through = due_bucket(until);
        let until = bucket_end(through);
        let loaded = self.scheduler.admit_until(until).await?;
        let window = HorizonWindow { until, marked: true };
        let from = match loaded {
            Some(loaded) if loaded >= until => return Ok(0),
            // The bucket after a whole one loaded; a bucket loaded in part is read again.
            Some(loaded) => DueCursor::at_bucket(due_bucket(loaded.plus(Duration::from_millis(1)))),
            None => DueCursor::start(),
        };
        // The common case, nothing to load, needs no exclusive section.
        let added = if self.store.live_jobs_due(&from, through, 1).await?.is_empty() {
            0
        } else {
            self.restore_range(from, through, false).await?.added
        };
        self.close_horizon(&window).await?;
        Ok(added)
    }

    /// Returns the end of what a restore at `now` reads; with a horizon (or a
    /// scheduler that still has one from before), first raises its admission mark there.
    async fn open_horizon(&self, now: Timestamp) -> QueueResult<HorizonWindow> {
        match self.horizon_span() {
            Some(span) => {
                let until = bucket_end(due_bucket(now.plus(span)));
                self.scheduler.admit_until(until).await?;
                Ok(HorizonWindow { until, marked: true })
            }
            None if self.scheduler.horizon().await?.is_some() => {
                // The horizon was turned off: everything is admitted and loaded.
                self.scheduler.admit_until(HORIZON_OFF).await?;
                Ok(HorizonWindow { until: HORIZON_OFF, marked: true })
            }
            None => Ok(HorizonWindow { until: HORIZON_OFF, marked: false }),
        }
    }

    /// Raises the loaded mark once a window is loaded.
    async fn close_horizon(&self, window: &HorizonWindow) -> QueueResult<()> {
        if window.marked {
            self.scheduler.mark_loaded(window.until).await?;
        }
        Ok(())
    }

    /// Restores the live jobs of the store after `from` and up to the
    /// due-time bucket `through`, page by page. Each page is read and written
    /// behind the scheduler's fence and, unless [`DelayQueue::fenced_alone`]
    /// says it is enough, in an exclusive section
    /// ([`DelayQueue::exclusive_with_journal`]).
    async fn restore_range(&self, from: DueCursor, through: u64, skip_overdue: bool) -> QueueResult<Restored> {
        let now = Timestamp::now();
        let batch = self.settings.restore_batch.max(1);
        let mut after = from;
        let mut outcome = Restored::default();
        loop {
            let alone = self.fenced_alone(after.bucket);
            let _exclusive = if alone { None } else { Some(self.exclusive_with_journal().await?) };
            // Before the read: the write skips what other nodes end after it.
            let fence = self.scheduler.open_restore().await?;
            let page = self.store.live_jobs_due(&after, through, batch).await?;
            let Some(last) = page.last() else { break };
            let next_after = DueCursor::after(last);
            let candidates: Vec<Job> = page.into_iter().filter(|job| !(skip_overdue && job.run_at < now)).collect();
            outcome.scheduled += candidates.len() as u64;
            let added_flags = if alone {
                self.restore_in_slices(&candidates, &fence).await?
            } else {
                self.scheduler.restore_batch(&candidates, &fence).await?
            };
            let added: Vec<&Job> =
                candidates.iter().zip(added_flags).filter_map(|(job, added)| added.then_some(job)).collect();
            let ended = self.forget_ended(&after, through, batch, &added).await?;
            let kept = (added.len() - ended) as u64;
            if kept > 0 {
                queue_metrics::record_restored(kept);
            }
            outcome.added += kept;
            after = next_after;
        }
        Ok(outcome)
    }

    /// Writes a page that is not due yet into the scheduler a slice at a
    /// time, one slice after another: a shared scheduler runs each write as
    /// one script that holds every other command back while it runs, and the
    /// timer, pops and acks of every node must not wait behind a whole page
    /// for jobs due only later.
    async fn restore_in_slices(&self, jobs: &[Job], fence: &RestoreFence) -> QueueResult<Vec<bool>> {
        let mut added = Vec::with_capacity(jobs.len());
        for slice in jobs.chunks(FUTURE_RESTORE_SLICE) {
            added.extend(self.scheduler.restore_batch(slice, fence).await?);
        }
        Ok(added)
    }

    /// Takes out of the scheduler the `added` jobs (restored from the page of
    /// live jobs after `after`, up to bucket `through`) that the store no longer calls
    /// live: ended in the store between the page read and the scheduler write
    /// without the scheduler being told (those it was told of, the restore
    /// fence kept out). Returns how many.
    async fn forget_ended(&self, after: &DueCursor, through: u64, batch: usize, added: &[&Job]) -> QueueResult<usize> {
        if added.is_empty() {
            return Ok(0);
        }
        let again = self.store.live_jobs_due(after, through, batch).await?;
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

    /// Returns whether a page of a restore from due-time bucket `bucket` on is
    /// read and written behind the scheduler's fence alone. Only jobs due by
    /// now can be ended by the scheduler itself (dead, expired), which
    /// journals it later; a shared scheduler's fence keeps out every other
    /// end. So a page wholly in the future of a shared scheduler (with a
    /// margin for the clocks of other nodes) is restored beside the timer and
    /// the operations, not between them.
    fn fenced_alone(&self, bucket: u64) -> bool {
        self.scheduler.is_external() && bucket > due_bucket(Timestamp::now().plus(CLOCK_MARGIN))
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
}

/// How far another node's clock may be ahead of this one's, for
/// [`DelayQueue::fenced_alone`].
const CLOCK_MARGIN: Duration = Duration::from_secs(1);

/// How many jobs of a page not due yet go into the scheduler in one write
/// ([`DelayQueue::restore_in_slices`]).
const FUTURE_RESTORE_SLICE: usize = 64;

/// The end of what a restore or a load reads, and whether it moves the
/// scheduler's horizon marks.
struct HorizonWindow {
    until: Timestamp,
    marked: bool,
}

/// What one walk over the store's live jobs did.
#[derive(Default)]
struct Restored {
    /// Live jobs considered (the `restored` count of `/reStore`).
    scheduled: u64,
    /// Jobs the scheduler did not hold and now does.
    added: u64,
}
