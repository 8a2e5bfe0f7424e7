//! How the Redis scheduler lays out its keys and bounds its calls, and the
//! bounds of its shard count.

use std::time::Duration;

/// The shard count of a standalone Redis when none is configured. Redis runs
/// scripts one at a time, so more shards there buy no parallelism; fewer mean
/// more jobs per script call (pushes, timer rounds and pops visit every shard)
/// (docs/design.md, "One shard on a standalone Redis").
pub const DEFAULT_STANDALONE_SHARDS: usize = 1;
/// Shards per cluster master when none is configured.
pub const DEFAULT_SHARDS_PER_MASTER: usize = 8;
/// The fewest shards of a cluster when none is configured.
pub const MIN_CLUSTER_SHARDS: usize = 16;
/// The most shards allowed.
pub const MAX_SHARDS: usize = delayq_common::defaults::MAX_REDIS_SHARDS;
/// How the Redis scheduler lays out its keys and bounds its calls.
#[derive(Clone, Debug)]
pub struct RedisSchedulerOptions {
    /// The prefix of every key and channel; nodes sharing one queue use the same.
    pub prefix: String,
    /// The number of shards (delay buckets). `None`: 1 on a standalone Redis,
    /// 8 per master in a cluster (at least 16). The first node to use a prefix
    /// records its count in Redis and later nodes adopt it.
    pub shards: Option<usize>,
    /// The longest one Redis call may take before it fails as unavailable.
    pub timeout: Duration,
}

impl Default for RedisSchedulerOptions {
    fn default() -> RedisSchedulerOptions {
        RedisSchedulerOptions {
            prefix: delayq_common::defaults::DEFAULT_REDIS_PREFIX.to_owned(),
            shards: None,
            timeout: Duration::from_secs(1),
        }
    }
}
