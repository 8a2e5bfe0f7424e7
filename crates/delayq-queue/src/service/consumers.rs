//! The service's side of the registry of consumers ([`crate::consumers`]).

use super::*;
use crate::consumers::{ConsumerKey, ConsumerView};

impl DelayQueue {
    /// Notes that `consumer` takes jobs of `topic` (in `group`) now; returns its key.
    pub(super) fn consumer_seen(&self, consumer: &ConsumerName, topic: &Topic, group: Option<&Group>) -> ConsumerKey {
        let key = ConsumerKey { consumer: consumer.clone(), topic: topic.clone(), group: group.cloned() };
        self.consumers.heartbeat(&key, Timestamp::now());
        key
    }

    /// Returns the registry of the consumers that reach this node.
    pub(crate) fn registry(&self) -> &crate::consumers::Consumers {
        &self.consumers
    }

    /// A consumer's heartbeat: it stays listed between pops that wait long.
    pub fn heartbeat(&self, key: &ConsumerKey) {
        self.consumers.heartbeat(key, Timestamp::now());
    }

    /// Returns every consumer seen within `consumers.forget_after`, through
    /// any node that shares this node's scheduler, sorted by topic, group and name.
    ///
    /// # Errors
    /// When the scheduler cannot be reached.
    pub async fn consumers(&self) -> QueueResult<Vec<ConsumerView>> {
        self.consumers.all(&*self.scheduler).await
    }
}
