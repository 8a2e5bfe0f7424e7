//! Defaults and bounds that the configuration checks and the crates that apply
//! them share, so that a setting the configuration accepts is one they accept.

/// The most shards the Redis scheduler spreads a deployment's keys over.
pub const MAX_REDIS_SHARDS: usize = 1024;

/// The largest request body the HTTP server reads unless configured otherwise.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// The ZooKeeper path under which the nodes of one deployment meet unless configured otherwise.
pub const DEFAULT_ZOOKEEPER_ROOT: &str = "/delayq";

/// The prefix of the Redis scheduler's keys unless configured otherwise.
pub const DEFAULT_REDIS_PREFIX: &str = "delayq";

/// The ZooKeeper session timeout asked for unless configured otherwise, in ms.
pub const DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS: u64 = 6_000;

/// The jobs a forwarding route reserves and publishes at a time unless configured otherwise.
pub const DEFAULT_FORWARD_BATCH: usize = 100;

/// The time one publish of a forwarding route may take unless configured otherwise, in ms.
pub const DEFAULT_FORWARD_TIMEOUT_MS: u64 = 10_000;

/// The most consumer groups a topic may declare: each due job of the topic
/// becomes one delivery per group, written in one fan-out, and a lookup of
/// the job lists them all.
pub const MAX_GROUPS_PER_TOPIC: usize = 100;
