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
    #[instrument(level = "debug", skip(self))]
    pub async fn bury(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        // As a finish: the job leaves the scheduler, which holds only live jobs.
        self.end_reserved(id, attempt, JobState::Dead, None).await
    }
}
