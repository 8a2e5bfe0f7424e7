//! What an operator does to jobs: run a delayed job now, move a waiting job
//! to a new due time, give a dead job another round of deliveries, one or
//! every dead job of a topic, delete one dead job, delete a topic's dead
//! jobs, reserve one job by its id.

use delayq_common::{Due, ErrorKind};
use delayq_store::StoreError;

use super::*;

/// How many dead jobs [`DelayQueue::retry_dead_of_topic`] reads at a time.
const DEAD_PAGE: usize = 500;

impl DelayQueue {
    /// Makes a delayed job due now, keeping everything else about it.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` when it is not
    /// delayed (ready, reserved, or ended: the error names the state).
    pub async fn run_now(&self, id: &JobId) -> QueueResult<Pushed> {
        let job = self.current(id).await?;
        if job.state != JobState::Delay {
            return Err(QueueError::WrongState { id: id.clone(), state: job.state });
        }
        let mut again = push_again(&job, Due::RunAt(Timestamp::now()));
        again.replace = true;
        self.push(again).await
    }

    /// Moves a waiting job (delayed or ready) to a new due time, keeping
    /// everything else about it: a push with `replace`, so the job is never
    /// lost or doubled on the way. A time in the past makes it due at once.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` when it is
    /// reserved or ended (the error names the state).
    pub async fn reschedule(&self, id: &JobId, run_at: Timestamp) -> QueueResult<Pushed> {
        let job = self.current(id).await?;
        if !matches!(job.state, JobState::Delay | JobState::Ready) {
            return Err(QueueError::WrongState { id: id.clone(), state: job.state });
        }
        let mut again = push_again(&job, Due::RunAt(run_at));
        again.replace = true;
        self.push(again).await
    }

    /// Gives a dead job a new round of deliveries: it is ready at once, its
    /// attempts counted from 1 again, with its history kept.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` when it is not
    /// dead; a business key another live job took since is a conflict.
    pub async fn retry_dead(&self, id: &JobId) -> QueueResult<Pushed> {
        let job = self.current(id).await?;
        if job.state != JobState::Dead {
            return Err(QueueError::WrongState { id: id.clone(), state: job.state });
        }
        match self.push(push_again(&job, Due::RunAt(Timestamp::now()))).await {
            // Another retry of the same job came first: it is live again.
            Err(QueueError::Store(StoreError::IdTaken(_))) => {
                let state = self.current(id).await?.state;
                Err(QueueError::WrongState { id: id.clone(), state })
            }
            other => other,
        }
    }

    /// Deletes one dead job with its history, as
    /// [`DelayQueue::delete_dead_of_topic`] does a topic's: its id is then
    /// unknown. One statement removes it only while it is dead, so a retry
    /// that came first keeps it, and no crash leaves it half deleted.
    ///
    /// # Errors
    /// `NotFound` when no job has this id; `WrongState` when it is not dead.
    pub async fn delete_dead(&self, id: &JobId) -> QueueResult<()> {
        // The timer's dead jobs are in the journal until it is written.
        self.store.flush().await?;
        if self.store.purge_dead_job(id).await? {
            return Ok(());
        }
        let state = self.current(id).await?.state;
        Err(QueueError::WrongState { id: id.clone(), state })
    }

    /// Reserves one job by its id (beanstalkd's `reserve-job`): a ready or
    /// delayed job is handed out at once, a dead one after a new round is
    /// given to it; its ttr runs from now, as after a pop.
    ///
    /// The scheduler lets go of the waiting job, the store records the
    /// reservation, and the scheduler takes the job back reserved: no pop
    /// can take it in between. A crash in between leaves the store saying it
    /// waits, and the reconciliation brings it back so.
    ///
    /// # Errors
    /// `NotFound` when no job ever had this id; `WrongState` when it is
    /// reserved or ended (a dead job retried meanwhile by another caller included).
    pub async fn reserve_job(&self, id: &JobId) -> QueueResult<Job> {
        if self.current(id).await?.state == JobState::Dead {
            self.retry_dead(id).await?;
        }
        let _id_guard = self.id_locks.lock(id).await;
        let _transition = self.transitions.read().await;
        self.store.check_journal_room()?;
        let current = self.current(id).await?;
        if !matches!(current.state, JobState::Delay | JobState::Ready) {
            return Err(QueueError::WrongState { id: id.clone(), state: current.state });
        }
        // A job only the store holds (beyond the horizon) has nothing to let go of.
        self.forget_in_scheduler(id).await?;
        let now = Timestamp::now();
        let mut reserved = current;
        reserved.state = JobState::Reserved;
        reserved.updated_at = now;
        self.store.record(vec![StateChange::of(&reserved, now)]).await?;
        self.scheduler.restore(&reserved).await?;
        Ok(reserved)
    }

    /// Retries every job of `topic` that is dead now; returns how many.
    ///
    /// # Errors
    /// When a backend fails (the jobs retried before it stay retried).
    pub async fn retry_dead_of_topic(&self, topic: &Topic) -> QueueResult<u64> {
        let mut retried = 0;
        let mut cursor = None;
        loop {
            let page = self.list(topic, JobState::Dead, DEAD_PAGE, cursor).await?;
            for job in &page.jobs {
                match self.retry_dead(&job.id).await {
                    Ok(_) => retried += 1,
                    // Retried meanwhile, or its business key taken by a live job: left as it is.
                    Err(refused) if refused.kind() == ErrorKind::Conflict => {}
                    Err(error) => return Err(error),
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(retried),
            }
        }
    }

    /// Deletes every job of `topic` that is dead now, with its history (its
    /// id is then unknown, as after the retention); returns how many.
    ///
    /// # Errors
    /// When the store fails (the jobs deleted before it stay deleted).
    pub async fn delete_dead_of_topic(&self, topic: &Topic) -> QueueResult<u64> {
        // The timer's dead jobs are in the journal until it is written.
        self.store.flush().await?;
        let mut deleted = 0;
        loop {
            let batch = self.store.purge_dead(topic, DEAD_PAGE).await?;
            deleted += batch;
            if batch < DEAD_PAGE as u64 {
                return Ok(deleted);
            }
        }
    }

    /// Returns a job as it is now, with its payload: the scheduler's state
    /// when it holds the job, else the store's once the journal is written
    /// (which holds the ends the timer made: dead, expired).
    async fn current(&self, id: &JobId) -> QueueResult<Job> {
        self.store.flush().await?;
        let stored = self.store.get(id).await?.ok_or_else(|| QueueError::NotFound(id.clone()))?;
        Ok(match self.scheduler.get(id).await? {
            Some(held) => stored.with_live_state(&held),
            None => stored,
        })
    }
}

/// A push that makes `job` anew, with its id, body and options, due at `due`.
fn push_again(job: &Job, due: Due) -> PushRequest {
    PushRequest {
        id: Some(job.id.clone()),
        topic: job.topic.clone(),
        body: job.body.clone(),
        due,
        create_time: Some(job.create_time),
        ttr: Some(job.ttr),
        priority: Some(job.priority),
        max_retries: Some(job.max_retries),
        retry_backoff: job.retry_backoff.clone(),
        ttl: job.ttl,
        subtopic: job.subtopic.clone(),
        biz_key: job.biz_key.clone(),
        replace: false,
        groups: Vec::new(),
    }
}
