//! One connection type over standalone Redis and Redis Cluster, and the
//! bound on every call.
//!
//! Standalone uses a [`ConnectionManager`] (one multiplexed connection that
//! reconnects by itself); a cluster uses the async [`ClusterConnection`]
//! (one multiplexed connection per master, following MOVED/ASK). Both are
//! cheap to clone and pipeline concurrent calls. Each call is wrapped in a
//! timeout, so an outage turns into [`QueueError::Unavailable`] within
//! about a second instead of a hang.

use std::future::Future;
use std::time::Duration;

use delayq_store::BoxError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::error::{QueueError, QueueResult};

/// The backend name reported in errors.
pub(super) const BACKEND: &str = "redis";

/// A standalone or cluster connection; the scheduler code is written once over it.
#[derive(Clone)]
pub(super) enum RedisConnection {
    /// One Redis server.
    Standalone(ConnectionManager),
    /// A Redis Cluster, found from its seed nodes.
    Cluster(ClusterConnection),
}

/// A Redis call that did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("redis did not answer within {0:?}")]
pub(super) struct TimedOut(pub(super) Duration);

impl RedisConnection {
    /// Connects to one URL (standalone) or to a cluster through several seed
    /// URLs (or one URL of a node that reports `cluster_enabled:1`).
    pub(super) async fn open(urls: &[String], timeout: Duration) -> QueueResult<RedisConnection> {
        let connecting = async {
            match urls {
                [url] if !is_cluster_node(url, timeout).await? => {
                    let client = redis::Client::open(url.as_str())?;
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout))
                        .set_number_of_retries(1)
                        .set_min_delay(Duration::from_millis(20))
                        .set_max_delay(timeout / 2);
                    let manager = ConnectionManager::new_with_config(client, config).await?;
                    Ok(RedisConnection::Standalone(manager))
                }
                seeds => {
                    let client = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
                        .connection_timeout(timeout)
                        .response_timeout(timeout)
                        .retries(2)
                        .build()?;
                    Ok(RedisConnection::Cluster(client.get_async_connection().await?))
                }
            }
        };
        bounded(timeout * 2, connecting).await
    }

    /// Returns whether this is a standalone server (not a cluster).
    pub(super) fn is_standalone(&self) -> bool {
        matches!(self, RedisConnection::Standalone(_))
    }

    /// Returns how many masters serve slots: 1 for a standalone server.
    pub(super) async fn masters(&self, timeout: Duration) -> QueueResult<usize> {
        if let RedisConnection::Standalone(_) = self {
            return Ok(1);
        }
        let mut connection = self.clone();
        let nodes: String = bounded(timeout, redis::cmd("CLUSTER").arg("NODES").query_async(&mut connection)).await?;
        let masters = nodes
            .lines()
            .filter(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let flags = fields.get(2).copied().unwrap_or_default();
                flags.contains("master") && !flags.contains("fail") && fields.len() > 8
            })
            .count();
        Ok(masters.max(1))
    }

    /// Sends one command under `timeout`.
    pub(super) async fn query<T: redis::FromRedisValue>(&self, command: &Cmd, timeout: Duration) -> QueueResult<T> {
        let mut connection = self.clone();
        bounded(timeout, command.query_async(&mut connection)).await
    }
}

impl RedisConnection {
    /// Sends a pipeline under `timeout`.
    pub(super) async fn query_pipeline<T: redis::FromRedisValue>(
        &self,
        pipeline: &Pipeline,
        timeout: Duration,
    ) -> QueueResult<T> {
        let mut connection = self.clone();
        bounded(timeout, pipeline.query_async(&mut connection)).await
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, command: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConnection::Standalone(connection) => connection.req_packed_command(command),
            RedisConnection::Cluster(connection) => connection.req_packed_command(command),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConnection::Standalone(connection) => connection.req_packed_commands(pipeline, offset, count),
            RedisConnection::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConnection::Standalone(connection) => connection.get_db(),
            RedisConnection::Cluster(connection) => connection.get_db(),
        }
    }
}

/// Returns whether the server at `url` is a cluster node (one seed of a cluster
/// is enough to find the rest).
async fn is_cluster_node(url: &str, timeout: Duration) -> RedisResult<bool> {
    let client = redis::Client::open(url)?;
    let config =
        redis::AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(Some(timeout));
    let mut connection = client.get_multiplexed_async_connection_with_config(&config).await?;
    let info: String = redis::cmd("INFO").arg("cluster").query_async(&mut connection).await?;
    Ok(info.lines().any(|line| line.trim() == "cluster_enabled:1"))
}

/// Runs a Redis call, failing as unavailable when it errs or takes longer than `timeout`.
pub(super) async fn bounded<T>(timeout: Duration, call: impl Future<Output = RedisResult<T>>) -> QueueResult<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(unavailable(error)),
        Err(_) => Err(unavailable(TimedOut(timeout))),
    }
}

/// Wraps a failure of Redis (or of what it returned) as [`QueueError::Unavailable`].
pub(super) fn unavailable(source: impl Into<BoxError>) -> QueueError {
    QueueError::Unavailable { backend: BACKEND, source: source.into() }
}
