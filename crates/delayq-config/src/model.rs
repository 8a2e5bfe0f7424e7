//! The configuration structs, with every default a named constant.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use delayq_common::defaults::{
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_REDIS_PREFIX, DEFAULT_ZOOKEEPER_ROOT, DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS,
};
use delayq_common::{redact, JobDefaults, Limits, RetryPolicy};
use serde::{Deserialize, Serialize};

use crate::beanstalk::BeanstalkConfig;
use crate::forward::ForwardConfig;

/// The default REST listen address.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8080";
/// The default gRPC listen address.
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:9090";
/// The default directory of the embedded store.
pub const DEFAULT_DATA_DIR: &str = "./data";
/// How long a graceful shutdown may take before the process gives up waiting.
pub const DEFAULT_SHUTDOWN_TIMEOUT_MS: u64 = 10_000;
/// The default number of jobs one timer round promotes.
pub const DEFAULT_PROMOTE_BATCH: usize = 1_000;
/// How far ahead the scheduler holds delayed jobs by default, in ms (1 hour).
pub const DEFAULT_HORIZON_MS: u64 = 3_600_000;
/// The shortest horizon allowed, in ms: the loader must stay ahead of the timer.
pub const MIN_HORIZON_MS: u64 = 1_000;
/// The longest horizon allowed, in ms (20 hours): the store indexes a job due
/// more than a day after its last write in a coarse bucket of about 70 minutes,
/// which must start beyond the furthest the loader can have loaded
/// (`job_bucket` in the store crate); the rest is a margin for the nodes' clocks.
pub const MAX_HORIZON_MS: u64 = 72_000_000;
/// How long a client may take to send a request's headers before its connection is closed.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// How long a request (other than a long-poll, bounded by its own timeout) may take.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// The most HTTP connections open at once; further ones wait to be accepted.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4_096;
/// The most long-poll waiters (REST `/pop` with a timeout, gRPC `Subscribe` streams) at once.
pub const DEFAULT_MAX_WAITERS: usize = 4_096;
/// The largest `result` a `/finish` may store, in bytes.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;
/// How long an ended job (and its history) is kept before it is purged: 7 days.
pub const DEFAULT_RETENTION_MS: u64 = 7 * 24 * 3_600_000;
/// The most state changes the background journal holds while the database is unreachable.
pub const DEFAULT_JOURNAL_MAX: usize = 100_000;

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Listen addresses, data directory, node identity.
    pub server: ServerConfig,
    /// The scheduler backend.
    pub scheduler: SchedulerConfig,
    /// The durable store backend.
    pub store: StoreConfig,
    /// Leader election.
    pub zookeeper: ZookeeperConfig,
    /// Request and job size limits.
    pub limits: LimitsConfig,
    /// Defaults for job options a push leaves out.
    pub jobs: JobsConfig,
    /// Bearer-token authentication.
    pub auth: AuthConfig,
    /// Forwarding of due jobs to brokers and webhooks.
    pub forward: ForwardConfig,
    /// The registry of consumers.
    pub consumers: ConsumersConfig,
    /// The web console at `/console`.
    pub console: ConsoleConfig,
    /// The beanstalkd protocol listener.
    pub beanstalk: BeanstalkConfig,
    /// Consumer groups declared at start, by topic (`orders = ["billing", "shipping"]`).
    /// Declaring is all the file does: a group left out later stays declared
    /// until `DELETE /topics/{topic}/groups/{group}` drops it.
    pub groups: BTreeMap<String, Vec<String>>,
}

/// The registry of consumers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsumersConfig {
    /// How long a consumer stays listed after its last pop or heartbeat, in ms.
    pub forget_after_ms: u64,
}

/// How long a silent consumer stays listed by default, in ms.
pub const DEFAULT_FORGET_AFTER_MS: u64 = 60_000;
/// The bounds of `consumers.forget_after_ms`: at least a second, at most a day.
pub const FORGET_AFTER_BOUNDS_MS: (u64, u64) = (1_000, 86_400_000);

impl Default for ConsumersConfig {
    fn default() -> ConsumersConfig {
        ConsumersConfig { forget_after_ms: DEFAULT_FORGET_AFTER_MS }
    }
}

impl ConsumersConfig {
    /// Returns how long a silent consumer stays listed.
    pub fn forget_after(&self) -> Duration {
        Duration::from_millis(self.forget_after_ms)
    }
}

/// The web console served at `/console` on the REST address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serves the console; off, `/console` is not routed.
    pub enabled: bool,
    /// Shows the pages without any action (pause, retry, delete, ...), and
    /// refuses every state-changing console request.
    pub read_only: bool,
}

impl Default for ConsoleConfig {
    fn default() -> ConsoleConfig {
        ConsoleConfig { enabled: true, read_only: false }
    }
}

/// Listen addresses, data directory, node identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The REST listen address (`DELAYQ_HTTP_ADDR`).
    pub http_addr: String,
    /// The gRPC listen address (`DELAYQ_GRPC_ADDR`).
    pub grpc_addr: String,
    /// Where the embedded store keeps its SQLite file (`DELAYQ_DATA_DIR`).
    pub data_dir: PathBuf,
    /// This node's name; its snowflake worker id is derived from it (`DELAYQ_NODE_ID`).
    pub node_id: Option<String>,
    /// How long a graceful shutdown may take, in ms.
    pub shutdown_timeout_ms: u64,
    /// Threads that serve requests and run the timers; `None`: one fewer than
    /// the machine has cores, at least one (see [`ServerConfig::worker_threads`]).
    pub worker_threads: Option<usize>,
    /// How long a client may take to send a request's headers, in ms; the
    /// connection is closed after it.
    pub header_read_timeout_ms: u64,
    /// How long any request but a long-poll may take, in ms.
    pub request_timeout_ms: u64,
    /// The most HTTP connections open at once.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            http_addr: DEFAULT_HTTP_ADDR.to_owned(),
            grpc_addr: DEFAULT_GRPC_ADDR.to_owned(),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            node_id: None,
            shutdown_timeout_ms: DEFAULT_SHUTDOWN_TIMEOUT_MS,
            worker_threads: None,
            header_read_timeout_ms: DEFAULT_HEADER_READ_TIMEOUT_MS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl ServerConfig {
    /// Returns the shutdown deadline.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.shutdown_timeout_ms)
    }

    /// Returns how many threads serve requests: the configured number, else
    /// one fewer than the machine's cores (at least one).
    ///
    /// The store keeps a core of its own busy: its writer runs on a thread
    /// outside the request threads, and on SQLite so does its database
    /// connection. With as many request threads as cores, they took turns
    /// with those on every commit; on two cores, one request thread served `/push`,
    /// `/push/batch` and the lateness workload with less CPU per job in 18 of
    /// 19 paired runs.
    pub fn worker_threads(&self) -> usize {
        self.worker_threads.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
            cores.saturating_sub(1).max(1)
        })
    }
}

/// The scheduler backend.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// `redis://…` (several comma-separated = Redis Cluster); unset: in-process (`DELAYQ_REDIS_URL`).
    pub redis_url: Option<String>,
    /// The prefix of every Redis key and channel; nodes sharing one queue use the same.
    pub redis_prefix: String,
    /// Delay buckets (shards) in Redis; unset: 1 on a standalone Redis, 8 per
    /// master (at least 16) in a cluster. The first node to use a prefix records
    /// the count and later nodes adopt it.
    pub redis_shards: Option<usize>,
    /// The most jobs one timer round promotes.
    pub promote_batch: usize,
    /// How far ahead the scheduler holds delayed jobs, in ms: a job due later
    /// lives in the store alone until the leader loads it ahead of its due
    /// time. `0`: every job is scheduled at once, however far off.
    pub horizon_ms: u64,
}

impl SchedulerConfig {
    /// Returns the horizon, `None` when it is off.
    pub fn horizon(&self) -> Option<std::time::Duration> {
        (self.horizon_ms > 0).then(|| std::time::Duration::from_millis(self.horizon_ms))
    }
}

impl Default for SchedulerConfig {
    fn default() -> SchedulerConfig {
        SchedulerConfig {
            redis_url: None,
            redis_prefix: DEFAULT_REDIS_PREFIX.to_owned(),
            redis_shards: None,
            promote_batch: DEFAULT_PROMOTE_BATCH,
            horizon_ms: DEFAULT_HORIZON_MS,
        }
    }
}

/// The durable store backend.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `mysql://…` or `sqlite://…`; unset: SQLite in the data directory (`DELAYQ_DATABASE_URL`).
    pub database_url: Option<String>,
    /// How SQLite syncs a commit to disk: `full` (the default) survives an OS
    /// crash or power cut; `normal` may lose the last commits (acknowledged
    /// pushes included) on one, in exchange for fewer fsyncs.
    pub sqlite_synchronous: SqliteSynchronous,
    /// How long an ended job and its history are kept, in ms; `0` keeps them forever.
    pub retention_ms: u64,
    /// The most state changes the background journal holds while the database
    /// is unreachable; past it, operations that journal answer 503.
    pub journal_max: usize,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            database_url: None,
            sqlite_synchronous: SqliteSynchronous::default(),
            retention_ms: DEFAULT_RETENTION_MS,
            journal_max: DEFAULT_JOURNAL_MAX,
        }
    }
}

impl std::fmt::Debug for SchedulerConfig {
    /// Shows the Redis URLs without their passwords.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerConfig")
            .field("redis_url", &self.redis_url.as_deref().map(redact::url))
            .field("redis_prefix", &self.redis_prefix)
            .field("redis_shards", &self.redis_shards)
            .field("promote_batch", &self.promote_batch)
            .field("horizon_ms", &self.horizon_ms)
            .finish()
    }
}

impl std::fmt::Debug for StoreConfig {
    /// Shows the database URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("database_url", &self.database_url.as_deref().map(redact::url))
            .field("sqlite_synchronous", &self.sqlite_synchronous)
            .field("retention_ms", &self.retention_ms)
            .field("journal_max", &self.journal_max)
            .finish()
    }
}

/// SQLite's `synchronous` setting for the embedded store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SqliteSynchronous {
    /// Every commit is synced before it is acknowledged: nothing acknowledged
    /// is lost on power loss.
    #[default]
    Full,
    /// Commits are synced at checkpoints only: an OS crash or power cut may
    /// lose the last acknowledged commits (a process crash does not).
    Normal,
}

/// Leader election through ZooKeeper.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZookeeperConfig {
    /// The connect string; unset: standalone (`DELAYQ_ZOOKEEPER`).
    pub connect: Option<String>,
    /// The root node under which delayq keeps its election and members.
    pub root: String,
    /// The session timeout, in ms.
    pub session_timeout_ms: u64,
}

impl Default for ZookeeperConfig {
    fn default() -> ZookeeperConfig {
        ZookeeperConfig {
            connect: None,
            root: DEFAULT_ZOOKEEPER_ROOT.to_owned(),
            session_timeout_ms: DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS,
        }
    }
}

/// Request and job size limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// The largest job body, in bytes (413 above it).
    pub max_body_bytes: usize,
    /// The longest delay, in ms.
    pub max_delay_ms: u64,
    /// The largest HTTP request body, in bytes (413 above it).
    pub max_request_bytes: usize,
    /// The largest `result` of a `/finish`, in bytes (413 above it).
    pub max_result_bytes: usize,
    /// The most long-poll waiters at once (REST `/pop` with a timeout, gRPC
    /// `Subscribe` streams); past it, 503.
    pub max_waiters: usize,
}

impl Default for LimitsConfig {
    fn default() -> LimitsConfig {
        let limits = Limits::default();
        LimitsConfig {
            max_body_bytes: limits.max_body_bytes,
            max_delay_ms: limits.max_delay.as_millis() as u64,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            max_waiters: DEFAULT_MAX_WAITERS,
        }
    }
}

impl LimitsConfig {
    /// Returns the limits a push is checked against.
    pub fn job_limits(&self) -> Limits {
        Limits { max_body_bytes: self.max_body_bytes, max_delay: Duration::from_millis(self.max_delay_ms) }
    }
}

/// Defaults for job options a push leaves out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobsConfig {
    /// The default ttr, in ms.
    pub ttr_ms: u64,
    /// The default priority (0 most urgent, 4 least).
    pub priority: u8,
    /// The default number of redeliveries after the first delivery.
    pub max_retries: u32,
    /// The nack backoff before the first redelivery, in ms; it doubles each time.
    pub retry_base_ms: u64,
    /// The longest nack backoff, in ms.
    pub retry_max_ms: u64,
}

impl Default for JobsConfig {
    fn default() -> JobsConfig {
        let defaults = JobDefaults::default();
        let retry = RetryPolicy::default();
        JobsConfig {
            ttr_ms: defaults.ttr.as_millis() as u64,
            priority: defaults.priority,
            max_retries: defaults.max_retries,
            retry_base_ms: retry.base.as_millis() as u64,
            retry_max_ms: retry.max.as_millis() as u64,
        }
    }
}

impl JobsConfig {
    /// Returns the job defaults.
    pub fn job_defaults(&self) -> JobDefaults {
        JobDefaults { ttr: Duration::from_millis(self.ttr_ms), priority: self.priority, max_retries: self.max_retries }
    }

    /// Returns the default nack backoff.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy { base: Duration::from_millis(self.retry_base_ms), max: Duration::from_millis(self.retry_max_ms) }
    }
}

/// Bearer-token authentication; off while both lists are empty.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Tokens that may use every route but the admin ones.
    pub tokens: Vec<String>,
    /// Tokens that may use every route, admin ones (`/reStore*`, `/clearAll`) included.
    pub admin_tokens: Vec<String>,
    /// Lets a node listen beyond loopback without tokens. Off by default: such
    /// a node refuses to start, so that nobody who can reach the port can clear the queue.
    pub allow_unauthenticated: bool,
}

impl std::fmt::Debug for AuthConfig {
    /// Shows how many tokens there are, never the tokens.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("tokens", &self.tokens.len())
            .field("admin_tokens", &self.admin_tokens.len())
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .finish()
    }
}
