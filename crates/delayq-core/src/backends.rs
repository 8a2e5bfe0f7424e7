//! The one place that picks the scheduler and store backends from the config.

use std::sync::Arc;

use anyhow::Context;
use delayq_config::Config;
use delayq_ha::{Leadership, Standalone, ZkConfig, ZookeeperLeadership};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::node::NodeIdentity;
use delayq_config::SqliteSynchronous;
use delayq_queue::redis::{JoinError, NodeRegistry, NodeRegistryOptions, RedisScheduler, RedisSchedulerOptions};
use delayq_queue::{MemoryScheduler, Scheduler};
use delayq_store::{JobStore, MysqlStore, SqliteStore, SqliteSync, StoreId, StoreOptions};

/// Opens the durable store: the configured database, else SQLite in the data directory.
pub(crate) async fn build_store(config: &Config, node: &str) -> anyhow::Result<Arc<dyn JobStore>> {
    let mut options = StoreOptions::from_config(config.store.retention_ms, config.store.journal_max);
    options.sqlite_sync = match config.store.sqlite_synchronous {
        SqliteSynchronous::Full => SqliteSync::Full,
        SqliteSynchronous::Normal => SqliteSync::Normal,
    };
    match config.store.database_url.as_deref() {
        None => {
            let store = SqliteStore::open_in_with_options(&config.server.data_dir, node.to_owned(), options)
                .await
                .with_context(|| format!("failed to open the store in {}", config.server.data_dir.display()))?;
            announce_sqlite_sync(&store).await;
            Ok(Arc::new(store))
        }
        Some(url) if url.starts_with("sqlite:") => {
            let store = SqliteStore::open_with_options(url, node.to_owned(), options)
                .await
                .context("failed to open the sqlite store")?;
            announce_sqlite_sync(&store).await;
            Ok(Arc::new(store))
        }
        Some(url) => {
            let store = MysqlStore::open_with_options(url, node.to_owned(), options)
                .await
                .context("failed to open the mysql store")?;
            Ok(Arc::new(store))
        }
    }
}

/// The scheduler, and on Redis this node's entry in the registry of its prefix.
pub(crate) struct SchedulerBackend {
    pub(crate) scheduler: Arc<dyn Scheduler>,
    /// Joined already; its heartbeat is the caller's to run.
    pub(crate) node_registry: Option<Arc<NodeRegistry>>,
}

/// Builds the scheduler: Redis when configured, else in-process. On Redis the
/// node joins the registry of its prefix, which refuses it when another live
/// node there writes to another store.
pub(crate) async fn build_scheduler(
    config: &Config,
    node: &str,
    store_id: &StoreId,
) -> anyhow::Result<SchedulerBackend> {
    let Some(urls) = config.scheduler.redis_url.as_deref() else {
        return Ok(SchedulerBackend { scheduler: Arc::new(MemoryScheduler::new()), node_registry: None });
    };
    let options = RedisSchedulerOptions {
        prefix: config.scheduler.redis_prefix.clone(),
        shards: config.scheduler.redis_shards,
        ..RedisSchedulerOptions::default()
    };
    let scheduler = RedisScheduler::connect(urls, options).await.context("failed to connect to redis")?;
    let registry_options = NodeRegistryOptions::default();
    let registry = scheduler.node_registry(node, store_id, registry_options);
    match registry.join().await {
        Ok(()) => {}
        Err(JoinError::ForeignStore(foreign)) => anyhow::bail!(
            "another delayq node ({}) on redis prefix {:?} uses a different store; every node sharing a redis \
             prefix must share the database: set DELAYQ_DATABASE_URL (store.database_url) to the same MySQL/MariaDB \
             database on every node (a node that stopped without shutting down counts for {} s after its last heartbeat)",
            foreign.name,
            config.scheduler.redis_prefix,
            registry_options.expiry.as_secs(),
        ),
        Err(JoinError::Queue(error)) => return Err(error).context("failed to join the node registry in redis"),
    }
    Ok(SchedulerBackend { scheduler: Arc::new(scheduler), node_registry: Some(Arc::new(registry)) })
}

/// Logs how SQLite syncs its commits, as read back from the database: what
/// an OS crash or power cut may cost is visible at start.
async fn announce_sqlite_sync(store: &SqliteStore) {
    match store.sqlite_sync().await {
        Ok(SqliteSync::Full) => info!(synchronous = "full", "sqlite store opened"),
        Ok(SqliteSync::Normal) => info!(
            synchronous = "normal",
            "sqlite store opened; an OS crash or power cut may lose the last acknowledged commits"
        ),
        Err(error) => warn!(error = %error, "cannot read back the sqlite synchronous setting"),
    }
}

/// Joins the ZooKeeper election when configured, else runs standalone.
pub(crate) async fn build_leadership(
    config: &Config,
    node: &NodeIdentity,
    cancel: CancellationToken,
) -> anyhow::Result<Arc<dyn Leadership>> {
    let Some(connect) = config.zookeeper.connect.as_deref() else {
        return Ok(Arc::new(Standalone::new(node.name.clone(), node.worker_id)));
    };
    let mut zk_config = ZkConfig::new(connect, node.name.clone());
    zk_config.root = config.zookeeper.root.clone();
    zk_config.session_timeout = std::time::Duration::from_millis(config.zookeeper.session_timeout_ms);
    zk_config.preferred_worker_id = Some(node.worker_id);
    let leadership = ZookeeperLeadership::start(zk_config, cancel).await.context("failed to start leader election")?;
    Ok(Arc::new(leadership))
}
