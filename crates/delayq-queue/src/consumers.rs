//! The registry of consumers: who takes jobs of which topic (and group), when
//! each was last seen, how many jobs each holds, and through which node.
//!
//! A consumer names itself on its pops (and heartbeats); each node keeps the
//! consumers that reach it, and a node that shares its scheduler with others
//! publishes them there ([`Scheduler::share_consumers`]), so any node lists
//! every consumer. A consumer silent for `forget_after` is forgotten.
//!
//! The jobs a consumer holds are counted by the node that handed them out:
//! a job leaves the count when it is finished, nacked or deleted through that
//! node, or when its ttr has passed (the reservation is over either way, and a
//! finish through another node is not seen here). The registry is bounded: a
//! node keeps at most [`MAX_CONSUMERS`] consumers, so clients that invent
//! names cannot make it grow without end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delayq_common::{ConsumerName, Group, Job, JobId, Timestamp, Topic};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::error::QueueResult;
use crate::scheduler::Scheduler;
use crate::service::DelayQueue;

/// How long a silent consumer stays listed, by default.
pub const DEFAULT_FORGET_AFTER: Duration = Duration::from_secs(60);
/// The most consumers one node keeps.
pub const MAX_CONSUMERS: usize = 10_000;
/// How often a node publishes its consumers to a scheduler it shares with other nodes.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Who a consumer is and what it takes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConsumerKey {
    /// Its name.
    pub consumer: ConsumerName,
    /// The topic it takes jobs of.
    pub topic: Topic,
    /// The group it takes them in; `None`: the topic's jobs themselves.
    pub group: Option<Group>,
}

/// A consumer as `/stats` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerView {
    /// Who it is and what it takes.
    pub key: ConsumerKey,
    /// The node it reached last.
    pub node: String,
    /// When it was last seen (a pop or a heartbeat).
    pub last_seen: Timestamp,
    /// How many jobs it holds: handed to it and not finished, nacked,
    /// deleted or past their ttr.
    pub in_flight: u64,
}

/// What a node knows of one consumer.
#[derive(Clone, Copy, Debug)]
struct Seen {
    last_seen: Timestamp,
    in_flight: u64,
}

/// The consumers of one node.
#[derive(Default)]
struct Registry {
    consumers: HashMap<ConsumerKey, Seen>,
    /// Each job handed out here to a named consumer, until its ttr passes.
    held: HashMap<JobId, (ConsumerKey, Timestamp)>,
}

impl Registry {
    /// Forgets what is over at `now`: reservations past their ttr, consumers
    /// silent since `forget_before`.
    fn prune(&mut self, now: Timestamp, forget_before: Timestamp) {
        let consumers = &mut self.consumers;
        consumers.retain(|_, seen| seen.last_seen >= forget_before);
        self.held.retain(|_, (key, deadline)| match consumers.get_mut(key) {
            Some(seen) if *deadline <= now => {
                seen.in_flight = seen.in_flight.saturating_sub(1);
                false
            }
            Some(_) => true,
            // Its consumer was forgotten.
            None => false,
        });
    }
}

/// The registry of the consumers that reach this node.
pub struct Consumers {
    node: String,
    forget_after: Duration,
    registry: Mutex<Registry>,
    /// How many jobs [`Registry::held`] counts, read without the lock so that
    /// an ack on a node no named consumer uses costs nothing.
    held: AtomicUsize,
    /// Whether the last publication listed any consumer (a node without
    /// consumers publishes once, to empty its field, then stays quiet).
    published_any: AtomicBool,
}

impl Consumers {
    /// A registry for node `node` that forgets consumers silent for `forget_after`.
    pub fn new(node: String, forget_after: Duration) -> Consumers {
        Consumers {
            node,
            forget_after,
            registry: Mutex::new(Registry::default()),
            held: AtomicUsize::new(0),
            published_any: AtomicBool::new(false),
        }
    }

    /// Returns how long a silent consumer stays listed.
    pub fn forget_after(&self) -> Duration {
        self.forget_after
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic while the lock was held leaves counts, nothing unsafe to read.
        self.registry.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes that `key` was seen at `now`; returns `false` when the registry
    /// is full and does not know it.
    fn touch(&self, registry: &mut Registry, key: &ConsumerKey, now: Timestamp) -> bool {
        if let Some(seen) = registry.consumers.get_mut(key) {
            seen.last_seen = seen.last_seen.max(now);
            return true;
        }
        if registry.consumers.len() >= MAX_CONSUMERS {
            registry.prune(now, self.forget_before(now));
            if registry.consumers.len() >= MAX_CONSUMERS {
                return false;
            }
        }
        registry.consumers.insert(key.clone(), Seen { last_seen: now, in_flight: 0 });
        true
    }

    fn forget_before(&self, now: Timestamp) -> Timestamp {
        Timestamp::from_millis(now.as_millis().saturating_sub(self.forget_after.as_millis() as u64))
    }

    /// A heartbeat: `key` is alive at `now`.
    pub fn heartbeat(&self, key: &ConsumerKey, now: Timestamp) {
        let mut registry = self.lock();
        self.touch(&mut registry, key, now);
    }

    /// `key` popped at `now` and received `jobs` (reserved).
    pub fn popped(&self, key: &ConsumerKey, jobs: &[Job], now: Timestamp) {
        let mut registry = self.lock();
        if !self.touch(&mut registry, key, now) {
            return;
        }
        let mut added = 0;
        for job in jobs {
            let deadline = now.plus(job.ttr);
            if let Some((previous, _)) = registry.held.insert(job.id.clone(), (key.clone(), deadline)) {
                // Handed out again (its ttr passed): the earlier holder no longer has it.
                if let Some(seen) = registry.consumers.get_mut(&previous) {
                    seen.in_flight = seen.in_flight.saturating_sub(1);
                }
            } else {
                added += 1;
            }
        }
        if let Some(seen) = registry.consumers.get_mut(key) {
            seen.in_flight += jobs.len() as u64;
        }
        self.held.fetch_add(added, Ordering::Relaxed);
    }

    /// Job `id` was finished, nacked or deleted through this node: whoever held it no longer does.
    pub fn released(&self, id: &JobId) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut registry = self.lock();
        if let Some((key, _)) = registry.held.remove(id) {
            self.held.fetch_sub(1, Ordering::Relaxed);
            if let Some(seen) = registry.consumers.get_mut(&key) {
                seen.in_flight = seen.in_flight.saturating_sub(1);
            }
        }
    }

    /// Returns this node's consumers as they are at `now`, forgetting those gone silent.
    pub fn local(&self, now: Timestamp) -> Vec<ConsumerView> {
        let mut registry = self.lock();
        registry.prune(now, self.forget_before(now));
        self.held.store(registry.held.len(), Ordering::Relaxed);
        let mut views: Vec<ConsumerView> = registry
            .consumers
            .iter()
            .map(|(key, seen)| ConsumerView {
                key: key.clone(),
                node: self.node.clone(),
                last_seen: seen.last_seen,
                in_flight: seen.in_flight,
            })
            .collect();
        views.sort_by(|a, b| a.key.cmp(&b.key));
        views
    }

    /// Publishes this node's consumers through `scheduler` and returns every
    /// node's that were seen within `forget_after`, one entry per consumer
    /// (the one seen last), sorted by topic, group and name.
    ///
    /// # Errors
    /// When the scheduler cannot be reached.
    pub async fn all(&self, scheduler: &dyn Scheduler) -> QueueResult<Vec<ConsumerView>> {
        let now = Timestamp::now();
        Ok(merge(self.share(scheduler, &self.local(now), now).await?))
    }

    /// Publishes this node's consumers through `scheduler`, unless it has
    /// none and published none the last time either.
    async fn publish(&self, scheduler: &dyn Scheduler) -> QueueResult<()> {
        let now = Timestamp::now();
        let local = self.local(now);
        if !local.is_empty() || self.published_any.load(Ordering::Relaxed) {
            self.share(scheduler, &local, now).await?;
        }
        Ok(())
    }

    /// Hands `local` (this node's consumers at `now`) to `scheduler`; returns every node's.
    async fn share(
        &self,
        scheduler: &dyn Scheduler,
        local: &[ConsumerView],
        now: Timestamp,
    ) -> QueueResult<Vec<ConsumerView>> {
        self.published_any.store(!local.is_empty(), Ordering::Relaxed);
        scheduler.share_consumers(&self.node, local, self.forget_before(now)).await
    }
}

/// Publishes `queue`'s consumers every [`PUBLISH_EVERY`] when its scheduler
/// is shared with other nodes, so that each node lists them all; returns when
/// `cancel` fires. A failed publication is tried again at the next one.
pub async fn run_publisher(queue: Arc<DelayQueue>, cancel: CancellationToken) {
    if !queue.scheduler().is_external() {
        return;
    }
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(PUBLISH_EVERY) => {}
        }
        if let Err(error) = queue.registry().publish(&**queue.scheduler()).await {
            debug!(error = %error, "publishing the consumers failed");
        }
    }
}

/// One entry per consumer, the one seen last, sorted by topic, group and name.
fn merge(views: Vec<ConsumerView>) -> Vec<ConsumerView> {
    let mut latest: HashMap<ConsumerKey, ConsumerView> = HashMap::new();
    for view in views {
        match latest.get(&view.key) {
            Some(kept) if kept.last_seen >= view.last_seen => {}
            _ => {
                latest.insert(view.key.clone(), view);
            }
        }
    }
    let mut merged: Vec<ConsumerView> = latest.into_values().collect();
    merged.sort_by(|a, b| {
        (&a.key.topic, &a.key.group, &a.key.consumer).cmp(&(&b.key.topic, &b.key.group, &b.key.consumer))
    });
    merged
}

/// Encodes one node's consumers for a shared scheduler: a line per consumer,
/// its fields separated by tabs (no name may hold one).
pub fn encode_views(views: &[ConsumerView]) -> String {
    let mut text = String::new();
    for view in views {
        let group = view.key.group.as_ref().map_or("", Group::as_str);
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            view.key.consumer,
            view.key.topic,
            group,
            view.last_seen.as_millis(),
            view.in_flight
        ));
    }
    text
}

/// Decodes what [`encode_views`] wrote for `node`, skipping any line it cannot read.
pub fn decode_views(node: &str, text: &str) -> Vec<ConsumerView> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let consumer = ConsumerName::parse(fields.next()?).ok()?;
            let topic = Topic::parse(fields.next()?).ok()?;
            let group = match fields.next()? {
                "" => None,
                group => Some(Group::parse(group).ok()?),
            };
            let last_seen = Timestamp::from_millis(fields.next()?.parse().ok()?);
            let in_flight = fields.next()?.parse().ok()?;
            Some(ConsumerView {
                key: ConsumerKey { consumer, topic, group },
                node: node.to_owned(),
                last_seen,
                in_flight,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ConsumerKey {
        ConsumerKey {
            consumer: ConsumerName::parse(name).expect("name"),
            topic: Topic::parse("orders").expect("topic"),
            group: None,
        }
    }

    fn job(id: &str, ttr_ms: u64) -> Job {
        Job {
            id: JobId::parse(id).expect("id"),
            topic: Topic::parse("orders").expect("topic"),
            subtopic: None,
            body: String::new(),
            biz_key: None,
            create_time: Timestamp::from_millis(0),
            delay: Duration::ZERO,
            run_at: Timestamp::from_millis(0),
            ttr: Duration::from_millis(ttr_ms),
            priority: 1,
            max_retries: 0,
            retry_backoff: Vec::new(),
            ttl: Duration::ZERO,
            attempt: 1,
            state: delayq_common::JobState::Reserved,
            result: None,
            updated_at: Timestamp::from_millis(0),
            groups: Vec::new(),
        }
    }

    #[test]
    fn counts_held_jobs_until_released_or_past_their_ttr() {
        let consumers = Consumers::new("node-1".to_owned(), Duration::from_secs(60));
        let now = Timestamp::from_millis(1_000_000);
        consumers.popped(&key("w1"), &[job("a", 5_000), job("b", 30_000)], now);
        assert_eq!(consumers.local(now)[0].in_flight, 2);
        consumers.released(&JobId::parse("a").expect("id"));
        assert_eq!(consumers.local(now)[0].in_flight, 1);
        // b's ttr passes: the reservation is over.
        let later = now.plus(Duration::from_secs(31));
        let views = consumers.local(later);
        assert_eq!((views[0].in_flight, views[0].last_seen), (0, now));
        assert_eq!(views[0].node, "node-1");
    }

    #[test]
    fn a_job_handed_out_again_leaves_its_earlier_holder() {
        let consumers = Consumers::new("n".to_owned(), Duration::from_secs(60));
        let now = Timestamp::from_millis(1_000_000);
        consumers.popped(&key("w1"), &[job("a", 30_000)], now);
        consumers.popped(&key("w2"), &[job("a", 30_000)], now.plus(Duration::from_secs(1)));
        let views = consumers.local(now.plus(Duration::from_secs(1)));
        let held: Vec<(String, u64)> =
            views.iter().map(|view| (view.key.consumer.to_string(), view.in_flight)).collect();
        assert_eq!(held, [("w1".to_owned(), 0), ("w2".to_owned(), 1)]);
    }

    #[test]
    fn forgets_silent_consumers_and_stays_bounded() {
        let consumers = Consumers::new("n".to_owned(), Duration::from_secs(60));
        let now = Timestamp::from_millis(1_000_000);
        for index in 0..MAX_CONSUMERS + 5 {
            consumers.heartbeat(&key(&format!("w{index}")), now);
        }
        assert_eq!(consumers.local(now).len(), MAX_CONSUMERS, "a full registry takes no new names");
        consumers.heartbeat(&key("w0"), now.plus(Duration::from_secs(59)));
        let later = now.plus(Duration::from_secs(61));
        let left: Vec<String> = consumers.local(later).iter().map(|view| view.key.consumer.to_string()).collect();
        assert_eq!(left, ["w0"], "the others were silent for longer than forget_after");
        consumers.heartbeat(&key("new"), later);
        assert_eq!(consumers.local(later).len(), 2, "room again once the silent ones are gone");
    }

    #[test]
    fn views_survive_the_shared_encoding_and_merge_to_the_latest() {
        let mut grouped = key("w1");
        grouped.group = Some(Group::parse("billing").expect("group"));
        let view = |key: ConsumerKey, node: &str, at: u64| ConsumerView {
            key,
            node: node.to_owned(),
            last_seen: Timestamp::from_millis(at),
            in_flight: 3,
        };
        let views = vec![view(key("w1"), "a", 10), view(grouped.clone(), "a", 20)];
        assert_eq!(decode_views("a", &encode_views(&views)), views);
        assert!(decode_views("a", "bad line\nw\tt\t\tx\t1\n").is_empty(), "unreadable lines are skipped");
        let merged = merge(vec![view(key("w1"), "a", 10), view(key("w1"), "b", 30), view(grouped, "a", 20)]);
        let nodes: Vec<&str> = merged.iter().map(|view| view.node.as_str()).collect();
        assert_eq!(nodes, ["b", "a"], "one entry per consumer, the latest; ungrouped first");
    }
}
