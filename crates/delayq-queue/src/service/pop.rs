//! The pop: reserve, journal, payloads, and the registry of consumers.

use super::*;

impl DelayQueue {
    /// Reserves up to `count` ready jobs of `topic`, waiting up to `wait` for
    /// the first; a paused topic hands out none ([`DelayQueue::pause`]).
    ///
    /// # Errors
    /// [`QueueError::Busy`] when `wait` is not zero and as many pops as
    /// [`QueueSettings::max_waiters`] are waiting already.
    pub async fn pop(&self, topic: &Topic, count: usize, wait: Duration) -> QueueResult<Vec<Job>> {
        self.pop_for(None, topic, None, count, wait).await
    }

    /// [`DelayQueue::pop`] of `group`'s deliveries (required when the topic
    /// has groups, see [`DelayQueue::declare_group`]), for the consumer that
    /// names itself `consumer`, which the registry of consumers notes
    /// ([`crate::consumers`]). A pause of the topic holds for its groups.
    #[instrument(level = "debug", skip(self))]
    pub async fn pop_for(
        &self,
        consumer: Option<&ConsumerName>,
        topic: &Topic,
        group: Option<&Group>,
        count: usize,
        wait: Duration,
    ) -> QueueResult<Vec<Job>> {
        let queue = self.popped_topic(topic, group).await?;
        let consumer = consumer.map(|name| self.consumer_seen(name, topic, group));
        // A pop journals what it reserves: while the database does not take
        // the journal, refuse rather than let it grow.
        self.store.check_journal_room()?;
        let _waiting = if wait.is_zero() {
            None
        } else {
            let permit =
                self.waiters.try_acquire().map_err(|_| QueueError::Busy { limit: self.settings.max_waiters })?;
            Some(permit)
        };
        let Some(wait) = self.wait_while_paused(topic, wait.min(MAX_POP_WAIT)).await else {
            return Ok(Vec::new());
        };
        let (jobs, now) = self.reserve_journaled(&queue, count, wait).await?;
        if jobs.is_empty() {
            return Ok(jobs);
        }
        for job in &jobs {
            queue_metrics::record_delivery(job.run_at, now);
            self.activity().record_delivery(job.run_at, now);
        }
        if let Some(consumer) = &consumer {
            self.consumers.popped(consumer, &jobs, now);
        }
        if self.scheduler.holds_payloads() {
            Ok(jobs)
        } else {
            self.with_payloads(jobs).await
        }
    }

    /// Reserves up to `count` ready jobs of `topic`, waiting up to `wait` for
    /// the first, and journals the reservations; returns them with the instant
    /// they were journaled at. The caller checked the journal's room.
    pub(super) async fn reserve_journaled(
        &self,
        topic: &Topic,
        count: usize,
        wait: Duration,
    ) -> QueueResult<(Vec<Job>, Timestamp)> {
        let jobs = self.scheduler.reserve(topic, count.clamp(1, MAX_POP_COUNT), wait).await?;
        let now = Timestamp::now();
        if !jobs.is_empty() {
            self.store.journal(jobs.iter().map(|job| StateChange::of(job, now)).collect());
        }
        Ok((jobs, now))
    }
}
