//! A single push, and a push that replaces a waiting job.

use super::*;

impl DelayQueue {
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
    pub(super) async fn push_one(&self, request: PushRequest, now: Timestamp) -> QueueResult<Pushed> {
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
    pub(super) async fn settle_schedule(&self, job: &Job, scheduled: QueueResult<()>) -> QueueResult<()> {
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

    pub(super) fn new_job(&self, request: PushRequest, now: Timestamp) -> QueueResult<Job> {
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
}
