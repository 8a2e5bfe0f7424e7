//! The Redis scheduler backend, for standalone Redis and Redis Cluster.
//!
//! Layout (Youzan's job pool, delay buckets and ready queues, sharded): jobs
//! are spread over N shards by a stable hash of their id, and every key of a
//! shard carries the hash tag `{prefix:shard}`, so each shard lives in one
//! cluster slot and every script touches one shard only:
//! - `{p:s}:j` HASH, the job pool: id (8 bytes for numeric ids) → compact record (`codec.rs`);
//! - `{p:s}:d` ZSET, the timeline: each job's one pending instant (run_at while
//!   delayed, ttl expiry while ready, ttr deadline while reserved);
//! - `{p:s}:r:<topic>` ZSET, the ready queue: score `priority * 2^43 + run_at`;
//! - `{p:s}:e` ZSET, while a restore window is open: the jobs the shard ended,
//!   which a restore's write skips (`lua/index.lua`, [`Scheduler::open_restore`]);
//! - `{p:s}:m` HASH of live counts per state and topic, topic codes, the
//!   shard's announced earliest instant and its data-epoch marker; a topic's
//!   fields live only while it has a live job in the shard, so `stats` reads
//!   as much as there are live topics, however many ended before;
//! - `<prefix>:consumers` HASH, a field per node: the consumers that node
//!   sees (`consumers.rs`, [`Scheduler::share_consumers`]);
//! - `<prefix>:meta` HASH holding the shard count all nodes agree on and the
//!   data epoch: a shard without the epoch's marker has lost its data
//!   ([`Scheduler::check_intact`]), which the leader repairs from the store.
//!
//! Every transition is one Lua script (`lua/`), atomic in Redis, so no
//! interleaving of nodes or clients loses, duplicates or resurrects a job.
//! Instants come from the caller's wall clock (`Timestamp::now()`, passed to
//! each script), as with the memory backend: delayq nodes are expected to run
//! on NTP-synchronised hosts, and a node's clock skew shifts its own
//! promotions by the same amount.
//!
//! Layout of this module:
//! - `connection`: standalone or cluster connection and call timeouts;
//! - `keys`: key names, shard of an id, id encoding; `codec`: the job record;
//! - `options`: the prefix, shard count and call bound;
//! - `scripts` and `lua/`: the transitions; `runner`: one script call per shard;
//!   `topic_codes`: the code each shard gave each topic, as last heard;
//! - `by_shard`: single schedules, finishes and deletes, and reads that arrive
//!   together ([`crate::combine`]), each batch cut into one script call per
//!   shard, the outcomes put back in order;
//! - `reserve`: cross-shard pop and long-poll; `notify`: pub/sub signals between nodes;
//! - `reply`: reading script replies;
//! - `nodes`: the registry of the nodes on a prefix (`<prefix>:nodes`), which
//!   refuses a node whose store is not the others'.

mod by_shard;
mod codec;
mod connection;
mod consumers;
mod keys;
mod nodes;
mod notify;
mod options;
mod reply;
mod reserve;
mod runner;
mod scripts;
mod topic_codes;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use delayq_common::{InvalidField, Job, JobId, Timestamp, Topic};
use futures::future::try_join_all;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use self::by_shard::{chunks_by_shard, remove_jobs, schedule_jobs, Gets, Removals, Schedules, SCHEDULE_CHUNK};
use self::connection::{unavailable, RedisConnection, TimedOut};
use self::keys::ShardKeys;
pub use self::nodes::{ForeignNode, JoinError, NodeRegistry, NodeRegistryOptions};
use self::notify::{Channels, Signals};
pub use self::options::{
    RedisSchedulerOptions, DEFAULT_SHARDS_PER_MASTER, DEFAULT_STANDALONE_SHARDS, MAX_SHARDS, MIN_CLUSTER_SHARDS,
};
use self::runner::{Removal, ScriptRunner};
use crate::combine::Combiner;
use crate::consumers::ConsumerView;
use crate::error::{QueueError, QueueResult};
use crate::scheduler::{HorizonMarks, MemoryUse, Promotion, RestoreFence, Scheduler, TopicStats};

/// The most rounds of shard calls one `promote_due` makes to fill its batch.
const MAX_PROMOTE_ROUNDS: usize = 4;

/// The scheduler on Redis; see the module docs for the layout.
pub struct RedisScheduler {
    runner: Arc<ScriptRunner>,
    /// Single schedules, sent together.
    schedules: Arc<Combiner<Schedules>>,
    /// Finishes and deletes, sent together.
    removals: Arc<Combiner<Removals>>,
    /// Reads of single jobs, sent together.
    gets: Arc<Combiner<Gets>>,
    subscriber: JoinHandle<()>,
}

impl RedisScheduler {
    /// Connects to Redis: one URL is a standalone server, several comma-separated
    /// URLs are seed nodes of a Redis Cluster.
    ///
    /// # Errors
    /// [`QueueError::Invalid`] for a bad URL list or options;
    /// [`QueueError::Unavailable`] when Redis cannot be reached within the timeout.
    pub async fn connect(urls: &str, options: RedisSchedulerOptions) -> QueueResult<RedisScheduler> {
        let urls: Vec<String> =
            urls.split(',').map(str::trim).filter(|url| !url.is_empty()).map(str::to_owned).collect();
        validate(&urls, &options)?;
        let clients = urls
            .iter()
            .map(|url| redis::Client::open(url.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| InvalidField::new("redis url", error.to_string()))?;
        let connection = RedisConnection::open(&urls, options.timeout).await?;
        let shards = agree_on_shards(&connection, &options).await?;
        let signals = Arc::new(Signals::new(origin_id(), shards));
        let (subscribed, first_subscription) = oneshot::channel();
        let subscriber = tokio::spawn(notify::run_subscriber(
            clients,
            Channels::new(&options.prefix),
            Arc::clone(&signals),
            options.timeout,
            subscribed,
        ));
        if !matches!(tokio::time::timeout(options.timeout * 2, first_subscription).await, Ok(Ok(()))) {
            subscriber.abort();
            return Err(unavailable(TimedOut(options.timeout * 2)));
        }
        let keys = (0..shards).map(|index| ShardKeys::new(&options.prefix, index)).collect();
        let runner = ScriptRunner::new(connection, keys, options.prefix, options.timeout, signals);
        info!(shards, cluster = urls.len() > 1, "redis scheduler connected");
        let runner = Arc::new(runner);
        let schedules = Arc::new(Combiner::new(Arc::clone(&runner)));
        let removals = Arc::new(Combiner::new(Arc::clone(&runner)));
        let gets = Arc::new(Combiner::new(Arc::clone(&runner)));
        Ok(RedisScheduler { runner, schedules, removals, gets, subscriber })
    }

    /// Returns the number of shards in use.
    pub fn shards(&self) -> usize {
        self.runner.shards.len()
    }

    /// Runs one `horizon.lua` operation on every shard; returns each shard's marks.
    async fn horizon_on_every_shard(
        &self,
        operation: &str,
        until: Timestamp,
    ) -> QueueResult<Vec<(Option<u64>, Option<u64>)>> {
        let runner = &self.runner;
        try_join_all(runner.shards.iter().map(|shard| runner.horizon(shard, operation, until))).await
    }
}

/// The lowest of the shards' marks, or `None` when some shard has none.
fn lowest(marks: impl Iterator<Item = Option<u64>>) -> Option<Timestamp> {
    let marks: Vec<u64> = marks.collect::<Option<_>>()?;
    marks.into_iter().min().map(Timestamp::from_millis)
}

impl Drop for RedisScheduler {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

#[async_trait]
impl Scheduler for RedisScheduler {
    fn backend(&self) -> &'static str {
        connection::BACKEND
    }

    async fn schedule(&self, job: &Job) -> QueueResult<()> {
        self.schedules.call(job.clone()).await
    }

    async fn schedule_batch(&self, jobs: &[Job]) -> QueueResult<Vec<QueueResult<()>>> {
        schedule_jobs(&self.runner, jobs).await
    }

    async fn restore(&self, job: &Job) -> QueueResult<bool> {
        let unfenced = RestoreFence::default();
        Ok(self.restore_batch(std::slice::from_ref(job), &unfenced).await?.first() == Some(&true))
    }

    /// Opens the restore window of every shard (`lua/restoring.lua`); the
    /// fence holds each shard's Redis time.
    async fn open_restore(&self) -> QueueResult<RestoreFence> {
        let runner = &self.runner;
        let marks = try_join_all(runner.shards.iter().map(|shard| runner.open_restore(shard))).await?;
        Ok(RestoreFence::new(marks))
    }

    async fn restore_batch(&self, jobs: &[Job], fence: &RestoreFence) -> QueueResult<Vec<bool>> {
        let now = Timestamp::now();
        let live = jobs.iter().enumerate().filter(|(_, job)| !job.state.is_terminal()).map(|(at, job)| (at, &job.id));
        let calls = chunks_by_shard(&self.runner, live, SCHEDULE_CHUNK);
        let replies = try_join_all(calls.iter().map(|(shard, positions)| {
            let chunk_jobs: Vec<&Job> = positions.iter().filter_map(|&position| jobs.get(position)).collect();
            // 0: no fence (a shard the fence has no mark of is not fenced either).
            let mark = fence.mark(shard.index).unwrap_or(0);
            async move { self.runner.restore(shard, &chunk_jobs, now, mark).await }
        }))
        .await?;
        let mut added = vec![false; jobs.len()];
        for ((_, positions), reply) in calls.iter().zip(replies) {
            for (&position, was_added) in positions.iter().zip(reply) {
                if let Some(slot) = added.get_mut(position) {
                    *slot = was_added;
                }
            }
        }
        Ok(added)
    }

    fn is_external(&self) -> bool {
        true
    }

    /// Compares every shard's marker with the data epoch of `<prefix>:meta`
    /// (created when missing, with the shard count): a missing epoch or an
    /// unmarked shard means Redis lost that data.
    async fn check_intact(&self) -> QueueResult<bool> {
        let runner = &self.runner;
        let meta = format!("{}:meta", runner.prefix);
        let mut pipeline = redis::pipe();
        pipeline.cmd("HSETNX").arg(&meta).arg("epoch").arg(origin_id());
        pipeline.cmd("HSETNX").arg(&meta).arg("shards").arg(runner.shards.len()).ignore();
        pipeline.cmd("HGET").arg(&meta).arg("epoch");
        let (created, epoch): (bool, String) = runner.connection.query_pipeline(&pipeline, runner.timeout).await?;
        let marked = try_join_all(runner.shards.iter().map(|shard| runner.mark(shard, &epoch))).await?;
        Ok(!created && marked.into_iter().all(|kept| kept))
    }

    async fn admit_until(&self, until: Timestamp) -> QueueResult<Option<Timestamp>> {
        let marks = self.horizon_on_every_shard("admit", until).await?;
        Ok(lowest(marks.iter().map(|(_, loaded)| *loaded)))
    }

    async fn mark_loaded(&self, until: Timestamp) -> QueueResult<()> {
        self.horizon_on_every_shard("loaded", until).await?;
        Ok(())
    }

    async fn horizon(&self) -> QueueResult<Option<HorizonMarks>> {
        let marks = self.horizon_on_every_shard("read", Timestamp::EPOCH).await?;
        let Some(admit) = lowest(marks.iter().map(|(admit, _)| *admit)) else { return Ok(None) };
        Ok(Some(HorizonMarks { admit, loaded: lowest(marks.iter().map(|(_, loaded)| *loaded)) }))
    }

    async fn share_consumers(
        &self,
        node: &str,
        local: &[ConsumerView],
        forget_before: Timestamp,
    ) -> QueueResult<Vec<ConsumerView>> {
        self.share_node_consumers(node, local, forget_before).await
    }

    /// `used_memory` and `maxmemory` of a standalone Redis with a `maxmemory`;
    /// `None` on a cluster (each master has its own) or without a bound.
    async fn memory_use(&self) -> QueueResult<Option<MemoryUse>> {
        let runner = &self.runner;
        if !runner.connection.is_standalone() {
            return Ok(None);
        }
        let info: String = runner.connection.query(redis::cmd("INFO").arg("memory"), runner.timeout).await?;
        let field = |name: &str| {
            info.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse::<u64>().ok())
        };
        Ok(match (field("used_memory"), field("maxmemory")) {
            (Some(used), Some(max)) if max > 0 => Some(MemoryUse { used, max }),
            _ => None,
        })
    }

    async fn replace(&self, job: &Job) -> QueueResult<Job> {
        self.runner.replace(job, Timestamp::now()).await
    }

    async fn reserve(&self, topic: &Topic, count: usize, wait: Duration) -> QueueResult<Vec<Job>> {
        self.runner.reserve_jobs(topic, count, wait).await
    }

    async fn finish(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        self.removals.call((id.clone(), Removal::Finish(attempt))).await.map_err(|error| named_attempt(error, attempt))
    }

    async fn nack(&self, id: &JobId, attempt: Option<u32>, delay: Duration) -> QueueResult<Job> {
        self.runner.nack(id, attempt, delay).await.map_err(|error| named_attempt(error, attempt))
    }

    async fn touch(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        self.runner.touch(id, attempt).await.map_err(|error| named_attempt(error, attempt))
    }

    async fn delete(&self, id: &JobId) -> QueueResult<Job> {
        self.removals.call((id.clone(), Removal::Delete)).await
    }

    async fn delete_batch(&self, ids: &[JobId]) -> QueueResult<u64> {
        let mut removed = 0;
        for chunk in ids.chunks(DELETE_BATCH_CHUNK) {
            let removals: Vec<(JobId, Removal)> = chunk.iter().map(|id| (id.clone(), Removal::Delete)).collect();
            for outcome in remove_jobs(&self.runner, &removals).await? {
                match outcome {
                    Ok(_) => removed += 1,
                    Err(QueueError::NotFound(_)) => {}
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(removed)
    }

    async fn get(&self, id: &JobId) -> QueueResult<Option<Job>> {
        self.gets.call(id.clone()).await
    }

    async fn promote_due(&self, now: Timestamp, max_batch: usize) -> QueueResult<Promotion> {
        let runner = &self.runner;
        let max_batch = max_batch.max(1);
        let now_ms = now.as_millis();
        let (mut known_due, sweep) = runner.signals.shard_due();
        let mut promotion = Promotion::default();
        // Shards known to be due (all of them on a sweep) share the batch; a
        // later round gives what is left of it to the shards still due.
        let due_at = |known_due: &[u64], shard: usize| known_due.get(shard).copied().unwrap_or(u64::MAX);
        let mut targets: Vec<&ShardKeys> =
            runner.shards.iter().filter(|shard| sweep || due_at(&known_due, shard.index) <= now_ms).collect();
        for _ in 0..MAX_PROMOTE_ROUNDS {
            if targets.is_empty() {
                break;
            }
            let budget = max_batch - promotion.changed.len();
            let limits = split_batch(budget, targets.len(), runner.next_start());
            let rounds = targets.iter().zip(limits).map(|(&shard, limit)| runner.promote(shard, now, limit));
            for (&shard, (changed, next_due)) in targets.iter().zip(try_join_all(rounds).await?) {
                promotion.changed.extend(changed);
                if let Some(known) = known_due.get_mut(shard.index) {
                    runner.signals.settle_shard_due(shard.index, *known, next_due);
                    *known = next_due.unwrap_or(u64::MAX);
                }
            }
            if promotion.changed.len() >= max_batch {
                break;
            }
            targets = runner.shards.iter().filter(|shard| due_at(&known_due, shard.index) <= now_ms).collect();
        }
        let earliest = known_due.into_iter().min().filter(|&due| due != u64::MAX);
        promotion.next_due = earliest.map(Timestamp::from_millis);
        promotion.more = earliest.is_some_and(|due| due <= now_ms);
        runner.signals.timer_saw(promotion.next_due);
        Ok(promotion)
    }

    fn fence(&self, epoch: u64) {
        self.runner.fence.fetch_max(epoch, std::sync::atomic::Ordering::AcqRel);
    }

    fn wakeup(&self) -> Arc<Notify> {
        Arc::clone(&self.runner.signals.timer)
    }

    async fn stats(&self) -> QueueResult<Vec<TopicStats>> {
        let metas = try_join_all(self.runner.shards.iter().map(|shard| self.runner.meta(shard))).await?;
        let mut per_topic: std::collections::BTreeMap<String, [u64; 3]> = std::collections::BTreeMap::new();
        for (field, count) in metas.into_iter().flatten() {
            let slot = match field.as_bytes().first() {
                Some(b'd') => 0,
                Some(b'r') => 1,
                Some(b'x') => 2,
                _ => continue,
            };
            let (Some(name), Ok(count)) = (field.get(1..), count.parse::<u64>()) else { continue };
            if let Some(total) = per_topic.entry(name.to_owned()).or_default().get_mut(slot) {
                *total += count;
            }
        }
        Ok(per_topic
            .into_iter()
            .filter_map(|(name, [delay, ready, reserved])| {
                let topic = Topic::parse_stored(name).ok()?;
                Some(TopicStats { topic, delay, ready, reserved })
            })
            .collect())
    }

    async fn clear(&self) -> QueueResult<u64> {
        let cleared = try_join_all(self.runner.shards.iter().map(|shard| self.runner.clear(shard))).await?;
        Ok(cleared.into_iter().sum())
    }

    async fn ping(&self) -> QueueResult<()> {
        self.runner.connection.query::<redis::Value>(&redis::cmd("PING"), self.runner.timeout).await.map(drop)
    }
}

/// Jobs a `delete_batch` hands to the removal scripts at a time.
const DELETE_BATCH_CHUNK: usize = 1_000;

/// Fills in the delivery the caller named of a stale-attempt refusal (the
/// script reports only the job's current one).
fn named_attempt(error: QueueError, attempt: Option<u32>) -> QueueError {
    match (error, attempt) {
        (QueueError::StaleAttempt { id, current, .. }, Some(attempt)) => {
            QueueError::StaleAttempt { id, attempt, current }
        }
        (other, _) => other,
    }
}

/// Splits a batch over `shards` parts, the remainder going to the parts from
/// `start` (modulo `shards`) on; the parts sum to `max_batch` (at least 1).
fn split_batch(max_batch: usize, shards: usize, start: usize) -> Vec<usize> {
    let max_batch = max_batch.max(1);
    let start = start % shards;
    let base = max_batch / shards;
    let extra = max_batch % shards;
    (0..shards).map(|shard| base + usize::from((shard + shards - start) % shards < extra)).collect()
}

fn validate(urls: &[String], options: &RedisSchedulerOptions) -> Result<(), InvalidField> {
    if urls.is_empty() {
        return Err(InvalidField::new("redis url", "must name at least one redis:// url"));
    }
    let prefix = &options.prefix;
    if prefix.is_empty() || prefix.contains(['{', '}', ' ']) {
        return Err(InvalidField::new("redis prefix", "must be non-empty without braces or spaces"));
    }
    if options.shards.is_some_and(|shards| shards == 0 || shards > MAX_SHARDS) {
        return Err(InvalidField::new("redis shards", format!("must be from 1 to {MAX_SHARDS}")));
    }
    if options.timeout.is_zero() {
        return Err(InvalidField::new("redis timeout", "must be positive"));
    }
    Ok(())
}

/// Returns the shard count recorded under the prefix, recording ours if none is.
async fn agree_on_shards(connection: &RedisConnection, options: &RedisSchedulerOptions) -> QueueResult<usize> {
    let wanted = match options.shards {
        Some(shards) => shards,
        None => {
            let masters = connection.masters(options.timeout).await?;
            if masters > 1 {
                (masters * DEFAULT_SHARDS_PER_MASTER).max(MIN_CLUSTER_SHARDS)
            } else {
                DEFAULT_STANDALONE_SHARDS
            }
        }
    };
    let meta = format!("{}:meta", options.prefix);
    let mut record = redis::pipe();
    record.cmd("HSETNX").arg(&meta).arg("shards").arg(wanted).ignore().cmd("HGET").arg(&meta).arg("shards");
    let (recorded,): (Option<usize>,) = connection.query_pipeline(&record, options.timeout).await?;
    let recorded = recorded.filter(|&shards| (1..=MAX_SHARDS).contains(&shards)).unwrap_or(wanted);
    if recorded != wanted && options.shards.is_some() {
        warn!(recorded, configured = wanted, "redis already holds another shard count under this prefix; using it");
    }
    Ok(recorded)
}

/// Returns a name for this instance that no other instance uses.
fn origin_id() -> String {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_nanos() as u64);
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{:x}.{:x}.{:x}", std::process::id(), nanos, sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_split_evenly_from_the_rotation_start() {
        assert_eq!(split_batch(1000, 16, 0).iter().sum::<usize>(), 1000);
        assert_eq!(split_batch(3, 4, 2), vec![1, 0, 1, 1]);
        assert_eq!(split_batch(1, 16, 5).iter().position(|&limit| limit == 1), Some(5));
        assert_eq!(split_batch(0, 4, 0).iter().sum::<usize>(), 1);
    }

    #[test]
    fn options_are_validated() {
        let urls = vec!["redis://127.0.0.1".to_owned()];
        assert!(validate(&urls, &RedisSchedulerOptions::default()).is_ok());
        assert!(validate(&[], &RedisSchedulerOptions::default()).is_err());
        let braces = RedisSchedulerOptions { prefix: "a{b}".into(), ..RedisSchedulerOptions::default() };
        assert!(validate(&urls, &braces).is_err());
        let no_shards = RedisSchedulerOptions { shards: Some(0), ..RedisSchedulerOptions::default() };
        assert!(validate(&urls, &no_shards).is_err());
    }
}
