//! Consumer groups: a topic may declare groups; each of its jobs, once due, is
//! delivered to every group declared then (or to those of them its push
//! named), and each group's delivery lives on as a job of its own, with its
//! own state, attempt, ttr, retries and dead state.
//!
//! A group's delivery of job `X` of topic `T` is the job `X/g` of topic `T/g`
//! ([`JobId::for_group`]): names no client can give, so the scheduler and the
//! store keep deliveries exactly as they keep jobs, and every operation,
//! restore and reconciliation works on them unchanged. The job itself keeps
//! its one place in the delay index until it falls due, whatever the number
//! of groups; the fan-out ([`crate::fan_out`]) then ends it and creates its
//! deliveries. The faces show a delivery as the job's id and topic with its
//! group.

use std::collections::HashMap;

use super::*;

pub use delayq_common::defaults::MAX_GROUPS_PER_TOPIC;

/// The declared groups of each topic that has any, by name.
pub type TopicGroups = HashMap<Topic, Vec<Group>>;

/// One group's delivery of a job, as `GET /jobs/{id}` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The group.
    pub group: Group,
    /// The delivery, with its freshest state and its history.
    pub details: JobDetails,
}

impl DelayQueue {
    /// Declares `group` of `topic`: from now on each job of the topic that
    /// falls due is delivered to it. Returns whether it was new.
    ///
    /// # Errors
    /// When the store fails; [`QueueError::Invalid`] naming `group` when the
    /// topic has [`MAX_GROUPS_PER_TOPIC`] groups already.
    pub async fn declare_group(&self, topic: &Topic, group: &Group) -> QueueResult<bool> {
        let declared = self.reread_groups().await?.get(topic).cloned().unwrap_or_default();
        if declared.len() >= MAX_GROUPS_PER_TOPIC && !declared.contains(group) {
            return Err(InvalidField::new(
                "group",
                format!("cannot be declared: topic {topic} has {MAX_GROUPS_PER_TOPIC} groups, the most it may have"),
            )
            .into());
        }
        let changed = self.store.set_group(topic, group, true, Timestamp::now()).await?;
        self.reread_groups().await?;
        Ok(changed)
    }

    /// Drops `group` of `topic`: jobs falling due from now on are not
    /// delivered to it; deliveries it has already keep going until they end.
    /// Returns whether it was declared.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn drop_group(&self, topic: &Topic, group: &Group) -> QueueResult<bool> {
        let changed = self.store.set_group(topic, group, false, Timestamp::now()).await?;
        self.reread_groups().await?;
        Ok(changed)
    }

    /// Returns the declared groups of every topic, read from the store at most
    /// a second ago (the last list read stands while the store cannot be read).
    pub async fn groups(&self) -> Arc<TopicGroups> {
        self.groups.get("consumer groups", || self.reread_groups()).await
    }

    /// Returns the declared groups of `topic`, by name; empty when it has none.
    pub async fn groups_of(&self, topic: &Topic) -> Vec<Group> {
        self.groups().await.get(topic).cloned().unwrap_or_default()
    }

    async fn reread_groups(&self) -> QueueResult<Arc<TopicGroups>> {
        let mut groups = TopicGroups::new();
        for (topic, group) in self.store.groups().await? {
            groups.entry(topic).or_default().push(group);
        }
        Ok(self.groups.remember(groups))
    }

    /// Returns the topic a pop of `topic` takes jobs from: the topic itself,
    /// or the queue of `group`'s deliveries.
    ///
    /// # Errors
    /// [`QueueError::Invalid`] naming `group` when the topic has groups and the
    /// pop named none: its jobs are delivered to its groups alone.
    pub(super) async fn popped_topic(&self, topic: &Topic, group: Option<&Group>) -> QueueResult<Topic> {
        match group {
            Some(group) => Ok(topic.for_group(group)),
            None if self.groups().await.contains_key(topic) => Err(InvalidField::new(
                "group",
                format!("is required: topic {topic} has consumer groups, and each pop takes one group's deliveries"),
            )
            .into()),
            None => Ok(topic.clone()),
        }
    }

    /// Runs `operation` on `group`'s delivery of job `id` (the job itself
    /// without a group), telling a delivery that never was from a job that never was.
    pub async fn on_delivery<T, F, Fut>(&self, id: &JobId, group: Option<&Group>, operation: F) -> QueueResult<T>
    where
        F: FnOnce(JobId) -> Fut,
        Fut: std::future::Future<Output = QueueResult<T>>,
    {
        let Some(group) = group else { return operation(id.clone()).await };
        match operation(id.for_group(group)).await {
            Err(QueueError::NotFound(_)) => match self.store.get(id).await? {
                Some(job) => {
                    Err(QueueError::Conflict(format!("job {id} ({}) has no delivery to group {group}", job.state)))
                }
                None => Err(QueueError::NotFound(id.clone())),
            },
            other => other,
        }
    }

    /// Returns every group's delivery of job `id`, each with its newest
    /// `history_limit` lines of history.
    pub async fn deliveries(&self, id: &JobId, history_limit: usize) -> QueueResult<Vec<Delivery>> {
        let mut deliveries = Vec::new();
        for stored in self.store.deliveries_of(id).await? {
            let Some((_, group)) = stored.id.group_parts() else { continue };
            let details = self.details_of(stored, history_limit).await?;
            deliveries.push(Delivery { group, details });
        }
        Ok(deliveries)
    }

    /// Cancels every live group's delivery of job `id`; returns how many.
    pub(super) async fn delete_deliveries(&self, id: &JobId) -> QueueResult<u64> {
        // A fan-out journals the rows of the deliveries it makes.
        self.store.flush().await?;
        let mut deleted = 0;
        for delivery in self.store.deliveries_of(id).await? {
            if !delivery.state.is_live() {
                continue;
            }
            match self.delete_one(&delivery.id).await {
                Ok(_) => deleted += 1,
                // Ended meanwhile.
                Err(QueueError::WrongState { .. } | QueueError::NotFound(_)) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(deleted)
    }
}
