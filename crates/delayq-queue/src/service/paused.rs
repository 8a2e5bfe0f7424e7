//! Paused topics: their jobs still fall due, but no pop (so no Subscribe
//! stream and no forwarder) takes them until the topic is resumed. The store
//! keeps the list, so a pause outlives restarts and leader changes; each node
//! reads it again at most every second (`cached.rs`), so a pause or resume
//! through another node holds here within that.

use std::collections::HashSet;

use tokio::time::Instant;

use super::*;

/// How often a pop that waits on a paused topic looks whether it was resumed.
const POLL: Duration = Duration::from_millis(250);

impl DelayQueue {
    /// Pauses `topic`: its jobs still fall due, but none is handed out until
    /// it is resumed. Pausing a paused topic changes nothing.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn pause(&self, topic: &Topic) -> QueueResult<()> {
        self.store.set_paused(topic, true, Timestamp::now()).await?;
        self.reread_paused().await?;
        Ok(())
    }

    /// Resumes `topic`. Resuming a running topic changes nothing.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn resume(&self, topic: &Topic) -> QueueResult<()> {
        self.store.set_paused(topic, false, Timestamp::now()).await?;
        self.reread_paused().await?;
        Ok(())
    }

    /// Returns the paused topics, read from the store at most a second
    /// ago. While the store cannot be read, the list last read (none, if it
    /// never was) stands, so that pops keep being served from the scheduler.
    pub async fn paused_topics(&self) -> Arc<HashSet<Topic>> {
        self.paused.get("paused topics", || self.reread_paused()).await
    }

    async fn reread_paused(&self) -> QueueResult<Arc<HashSet<Topic>>> {
        let topics: HashSet<Topic> = self.store.paused_topics().await?.into_iter().collect();
        Ok(self.paused.remember(topics))
    }

    /// Waits while `topic` is paused, at most `wait`; returns what is left
    /// of `wait`, or `None` when it ran out with the topic still paused.
    pub(super) async fn wait_while_paused(&self, topic: &Topic, wait: Duration) -> Option<Duration> {
        let deadline = Instant::now() + wait;
        while self.paused_topics().await.contains(topic) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            tokio::time::sleep(left.min(POLL)).await;
        }
        Some(deadline.saturating_duration_since(Instant::now()))
    }
}
