//! A single push, and a push that replaces a waiting job.

use super::*;

impl DelayQueue {
    /// Adds one job, or updates a waiting one when the push says `replace`.
    ///
    /// The job is durable in the store before this returns `Ok`.
    #[instrument(level = "debug", skip_all, fields(topic = %request.topic))]
    pub async fn push(&self, request: PushRequest) -> QueueResult<Pushed> {
        let now = Timestamp::now();
        let _pushing = self.pushes.read().await;
        self.push_one(request, now).await
    }

    /// Pushes one job under its id's lock (the caller holds [`DelayQueue::pushes`]).
    pub(super) async fn push_one(&self, request: PushRequest, now: Timestamp) -> QueueResult<Pushed> {
        if request.replace {
            if let Some((target, _)) = self.find_replace_target(&request).await? {
                let _id_guard = self.id_locks.lock_all(request.id.iter().chain([&target.id])).await;
                // Read again under the lock: a finish, delete or replace may have moved it meanwhile.
                return match self.find_replace_target(&request).await? {
                    Some((existing, true)) => self.replace(existing, request, now).await,
                    Some((existing, false)) => self.replace_unscheduled(existing, request, now).await,
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
        self.record_pushes(1);
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
            let same_body = held.body == job.body || !self.scheduler.holds_payloads();
            if held.create_time == job.create_time && held.topic == job.topic && same_body {
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

    /// Returns the live job a replace push names (by id, else by business
    /// key) and whether the scheduler holds it.
    async fn find_replace_target(&self, request: &PushRequest) -> QueueResult<Option<(Job, bool)>> {
        if let Some(id) = &request.id {
            if let Some(job) = self.scheduler.get(id).await? {
                return Ok(Some((job, true)));
            }
            // Beyond the horizon (or lost by the scheduler): the store has it.
            if let Some(job) = self.store.get(id).await?.filter(|job| job.state.is_live()) {
                return Ok(Some((job, false)));
            }
        }
        let Some(biz_key) = &request.biz_key else { return Ok(None) };
        let Some(stored) = self.store.find_live_by_biz_key(&request.topic, biz_key).await? else { return Ok(None) };
        // A job found by its key may be another id than the one named, which was not asked about.
        Ok(Some(match self.scheduler.get(&stored.id).await? {
            Some(held) => (held, true),
            None => (stored, false),
        }))
    }

    /// Replaces a waiting job the scheduler holds (the caller holds its id's lock).
    async fn replace(&self, existing: Job, request: PushRequest, now: Timestamp) -> QueueResult<Pushed> {
        let job = self.replacement(&existing, request, now)?;
        let existing = self.with_payload(existing).await?;
        let _payload = self.payload_locks.lock(&job.id).await;
        self.store.replace(job.clone()).await?;
        let scheduled = match self.scheduler.replace(&job).await {
            Ok(scheduled) => scheduled,
            Err(refused @ (QueueError::WrongState { .. } | QueueError::NotFound(_))) => {
                // A consumer popped it (or the timer ended it) after the check:
                // the store takes back the job the scheduler holds, so the
                // refused replace changes nothing.
                if let Some(current) = self.scheduler.get(&job.id).await? {
                    self.store.replace(self.as_scheduled(&existing, current)).await?;
                }
                return Err(refused);
            }
            Err(error) => return Err(error),
        };
        self.record_pushes(1);
        Ok(Pushed { id: scheduled.id, run_at: scheduled.run_at })
    }

    /// Replaces a waiting job only the store holds: due beyond the horizon (or
    /// lost by the scheduler). The caller holds its id's lock.
    ///
    /// Under [`DelayQueue::transitions`], so a restore or load of this process
    /// does not fall between the store write and the scheduler's; one of
    /// another node is kept off by the delete below, which its fence notes.
    async fn replace_unscheduled(&self, existing: Job, request: PushRequest, now: Timestamp) -> QueueResult<Pushed> {
        let job = self.replacement(&existing, request, now)?;
        let _transition = self.transitions.read().await;
        let _payload = self.payload_locks.lock(&job.id).await;
        self.store.replace(job.clone()).await?;
        match self.scheduler.replace(&job).await {
            // A load brought it meanwhile.
            Ok(scheduled) => {
                self.record_pushes(1);
                return Ok(Pushed { id: scheduled.id, run_at: scheduled.run_at });
            }
            Err(QueueError::NotFound(_)) => {}
            Err(refused @ QueueError::WrongState { .. }) => {
                // A load brought it, it fell due and a consumer took it.
                if let Some(current) = self.scheduler.get(&job.id).await? {
                    self.store.replace(self.as_scheduled(&existing, current)).await?;
                }
                return Err(refused);
            }
            Err(error) => return Err(error),
        }
        // A restore under way that read the old version skips it now.
        self.forget_in_scheduler(&job.id).await?;
        let scheduled = self.scheduler.schedule(&job).await;
        self.settle_schedule(&job, scheduled).await?;
        // Another node may have ended it after the store write: the replace
        // came first, the end stands.
        if !self.store.get(&job.id).await?.is_some_and(|stored| stored.state.is_live()) {
            self.forget_in_scheduler(&job.id).await?;
        }
        self.record_pushes(1);
        Ok(Pushed { id: job.id, run_at: job.run_at })
    }

    /// Returns the new version of `existing` a replace push asks for.
    fn replacement(&self, existing: &Job, request: PushRequest, now: Timestamp) -> QueueResult<Job> {
        if !matches!(existing.state, JobState::Delay | JobState::Ready) {
            return Err(QueueError::WrongState { id: existing.id.clone(), state: existing.state });
        }
        if existing.topic != request.topic {
            return Err(QueueError::Conflict(format!("job {} belongs to topic {}", existing.id, existing.topic)));
        }
        let mut job = request.into_job(existing.id.clone(), now, &self.settings.defaults);
        job.attempt = existing.attempt;
        Ok(job)
    }
}
