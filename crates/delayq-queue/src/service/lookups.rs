//! Reads of jobs: by id (with its history and its groups' deliveries), by
//! business key, and listings.

use super::*;

/// The longest [`DelayQueue::list_by_id`] waits for the journal to be written.
const LIST_JOURNAL_WAIT: Duration = Duration::from_millis(50);

impl DelayQueue {
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
        let job = match self.store.get(id).await? {
            Some(job) => job,
            // A fan-out journals the rows of the deliveries it makes.
            None if id.group_parts().is_some() => {
                self.store.flush().await?;
                self.store.get(id).await?.ok_or_else(|| QueueError::NotFound(id.clone()))?
            }
            None => return Err(QueueError::NotFound(id.clone())),
        };
        let of_groups = id.group_parts().is_none() && self.groups().await.contains_key(&job.topic);
        let mut details = self.details_of(job, history_limit).await?;
        if id.group_parts().is_none() {
            if of_groups {
                // Its deliveries' rows may still be in the journal.
                self.store.flush().await?;
            }
            details.deliveries = self.deliveries(id, history_limit).await?;
        }
        Ok(details)
    }

    /// Returns a stored job with its freshest state and its history.
    pub(super) async fn details_of(&self, mut job: Job, history_limit: usize) -> QueueResult<JobDetails> {
        let id = job.id.clone();
        if job.state.is_live() {
            // The scheduler is ahead of the background journal.
            if let Ok(Some(live)) = self.scheduler.get(&id).await {
                job = job.with_live_state(&live);
            }
        }
        let history = self.store.history(&id, history_limit.min(MAX_HISTORY_LIMIT)).await?;
        Ok(JobDetails { job, history, deliveries: Vec::new() })
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

    /// Lists a topic's jobs in a state by id, after the id `after` (the
    /// console's listing): each page costs the same however many jobs the
    /// topic holds. The queue's ids follow push order.
    ///
    /// It waits for the journal (the timer's changes) at most
    /// `LIST_JOURNAL_WAIT`: a page is never held up behind a backlog of
    /// promotions, and a change still in the journal then shows on the next view.
    pub async fn list_by_id(
        &self,
        topic: &Topic,
        state: JobState,
        limit: usize,
        after: Option<&JobId>,
    ) -> QueueResult<Vec<Job>> {
        if let Ok(flushed) = tokio::time::timeout(LIST_JOURNAL_WAIT, self.store.flush()).await {
            flushed?;
        }
        Ok(self.store.list_by_id(topic, state, limit, after).await?)
    }
}
