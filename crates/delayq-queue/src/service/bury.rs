//! Burying: a consumer sets a reserved job aside as dead (beanstalkd's
//! `bury`), where it waits, visible, for [`DelayQueue::retry_dead`] (`kick`)
//! or [`DelayQueue::delete_dead`].

use super::*;

impl DelayQueue {
    /// Moves a reserved job to `dead` at once, whatever retries it has left.
    /// With `attempt`, only that delivery of it.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` when it is not
    /// reserved; `StaleAttempt` when `attempt` is not its current delivery.
    #[instrument(skip(self))]
    pub async fn bury(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        let _id_guard = self.id_locks.lock(id).await;
        let _transition = self.transitions.read().await;
        let (mut job, _held) = self.live_job_or_stored(id).await?;
        require_reserved(&job)?;
        check_attempt(&job, attempt)?;
        let now = Timestamp::now();
        job.state = JobState::Dead;
        job.updated_at = now;
        self.store.record(vec![StateChange::of(&job, now)]).await?;
        // The scheduler holds only live jobs: a dead one leaves it. Its ttr may
        // have run out meanwhile; the consumer's bury still wins, as a finish's does.
        self.forget_in_scheduler(id).await?;
        self.consumers.released(id);
        Ok(job)
    }
}
