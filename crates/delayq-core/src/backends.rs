//! The one place that picks the scheduler and store backends from the config.

use std::sync::Arc;

use anyhow::{bail, Context};
use delayq_config::Config;
use delayq_queue::{MemoryScheduler, Scheduler};
use delayq_store::{JobStore, SqliteStore};

/// Opens the durable store: the configured database, else SQLite in the data directory.
pub(crate) async fn build_store(config: &Config, node: &str) -> anyhow::Result<Arc<dyn JobStore>> {
    match config.store.database_url.as_deref() {
        None => {
            let store = SqliteStore::open_in(&config.server.data_dir, node.to_owned())
                .await
                .with_context(|| format!("failed to open the store in {}", config.server.data_dir.display()))?;
            Ok(Arc::new(store))
        }
        Some(url) if url.starts_with("sqlite:") => {
            let store = SqliteStore::open(url, node.to_owned()).await.context("failed to open the sqlite store")?;
            Ok(Arc::new(store))
        }
        Some(_) => bail!("the mysql store is not available in this build"),
    }
}

/// Builds the scheduler: Redis when configured, else in-process.
pub(crate) async fn build_scheduler(config: &Config) -> anyhow::Result<Arc<dyn Scheduler>> {
    match config.scheduler.redis_url.as_deref() {
        None => Ok(Arc::new(MemoryScheduler::new())),
        Some(_) => bail!("the redis scheduler is not available in this build"),
    }
}
