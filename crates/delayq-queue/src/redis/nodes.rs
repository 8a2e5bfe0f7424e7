//! The registry of the nodes on one prefix: every node sharing a Redis queue
//! must share its durable store too.
//!
//! A node whose store is its own (a SQLite file on its host) keeps live copies
//! of jobs the other nodes finish; its next restore from that store would hand
//! them out again. So each node records, in `<prefix>:nodes` (one hash, so one
//! cluster slot), its store id and a heartbeat, and a node refuses to join
//! while a live node uses another store. The heartbeat is refreshed every
//! [`NodeRegistryOptions::heartbeat`]; an entry older than
//! [`NodeRegistryOptions::expiry`] belongs to a node that is gone (crashed
//! without leaving) and no longer counts.

use std::sync::Arc;
use std::time::Duration;

use delayq_store::StoreId;
use redis::{Script, Value};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::connection::{bounded, unavailable, RedisConnection};
use super::reply;
use super::RedisScheduler;
use crate::error::QueueResult;

/// How often a node refreshes its entry, and when an entry counts as gone.
#[derive(Clone, Copy, Debug)]
pub struct NodeRegistryOptions {
    /// The time between two heartbeats.
    pub heartbeat: Duration,
    /// How old a heartbeat may be before its node counts as gone: a few
    /// heartbeats, so that a slow Redis call or a busy host does not drop a
    /// live node.
    pub expiry: Duration,
}

impl Default for NodeRegistryOptions {
    fn default() -> NodeRegistryOptions {
        NodeRegistryOptions { heartbeat: Duration::from_secs(2), expiry: Duration::from_secs(10) }
    }
}

/// A live node of the prefix whose store is not this node's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignNode {
    /// Its node name.
    pub name: String,
    /// The id of its store.
    pub store_id: String,
    /// How long ago its last heartbeat was.
    pub seen_ago: Duration,
}

/// Why a node could not join the registry.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A live node of the prefix uses another store.
    #[error(
        "another delayq node ({}) on this redis prefix uses a different store (its heartbeat was {} ms ago)",
        .0.name,
        .0.seen_ago.as_millis()
    )]
    ForeignStore(ForeignNode),
    /// Redis could not be asked.
    #[error(transparent)]
    Queue(#[from] crate::error::QueueError),
}

/// This node's entry in the registry of its prefix.
pub struct NodeRegistry {
    connection: RedisConnection,
    script: Script,
    key: String,
    /// Unique per process: two nodes that share a name still have two entries.
    instance: String,
    name: String,
    store_id: StoreId,
    call_timeout: Duration,
    options: NodeRegistryOptions,
}

impl RedisScheduler {
    /// Returns the registry entry of a node named `name` whose store is
    /// `store_id`, on this scheduler's prefix and connection. Nothing is
    /// written until [`NodeRegistry::join`].
    pub fn node_registry(&self, name: &str, store_id: &StoreId, options: NodeRegistryOptions) -> NodeRegistry {
        NodeRegistry {
            connection: self.runner.connection.clone(),
            script: Script::new(include_str!("lua/nodes.lua")),
            key: format!("{}:nodes", self.runner.prefix),
            instance: super::origin_id(),
            name: name.to_owned(),
            store_id: store_id.clone(),
            call_timeout: self.runner.timeout,
            options,
        }
    }
}

impl NodeRegistry {
    /// Records this node, unless a live node of the prefix uses another store.
    ///
    /// # Errors
    /// [`JoinError::ForeignStore`] naming that node (nothing is written);
    /// [`JoinError::Queue`] when Redis is unavailable.
    pub async fn join(&self) -> Result<(), JoinError> {
        match self.call("join").await? {
            None => Ok(()),
            Some(foreign) => Err(JoinError::ForeignStore(foreign)),
        }
    }

    /// Refreshes this node's entry (writing it again if Redis lost it); returns
    /// a live node that uses another store, which can only have joined while
    /// this node's heartbeat was late.
    ///
    /// # Errors
    /// [`QueueError::Unavailable`](crate::QueueError::Unavailable) when Redis is.
    pub async fn heartbeat(&self) -> QueueResult<Option<ForeignNode>> {
        self.call("beat").await
    }

    /// Removes this node's entry.
    ///
    /// # Errors
    /// [`QueueError::Unavailable`](crate::QueueError::Unavailable) when Redis is.
    pub async fn leave(&self) -> QueueResult<()> {
        self.call("leave").await.map(drop)
    }

    /// Sends a heartbeat every [`NodeRegistryOptions::heartbeat`] until
    /// `cancel`, then leaves. A foreign store is logged as an error when it
    /// appears and when it is gone; failed heartbeats are logged and retried.
    pub async fn run_heartbeat(self: Arc<Self>, cancel: CancellationToken) {
        let mut reported: Option<String> = None;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(self.options.heartbeat) => {}
            }
            match self.heartbeat().await {
                Ok(foreign) => self.report(&mut reported, foreign),
                Err(failure) => warn!(cause = %failure, "node heartbeat failed"),
            }
        }
        match self.leave().await {
            Ok(()) => info!(node = %self.name, "left the node registry"),
            Err(failure) => warn!(cause = %failure, "node registry entry not removed; it expires by itself"),
        }
    }

    /// Logs a foreign store once when it appears and once when it is gone.
    fn report(&self, reported: &mut Option<String>, foreign: Option<ForeignNode>) {
        match (foreign, reported.as_deref()) {
            (Some(foreign), seen) if seen != Some(foreign.name.as_str()) => {
                error!(
                    other_node = %foreign.name,
                    other_store = %foreign.store_id,
                    store = %self.store_id,
                    "another node on this redis prefix uses a different store; jobs may be delivered twice"
                );
                *reported = Some(foreign.name);
            }
            (None, Some(_)) => {
                info!("every node on this redis prefix uses this node's store again");
                *reported = None;
            }
            _ => {}
        }
    }

    async fn call(&self, mode: &str) -> QueueResult<Option<ForeignNode>> {
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(&self.key)
            .arg(mode)
            .arg(&self.instance)
            .arg(self.store_id.as_str())
            .arg(&self.name)
            .arg(u64::try_from(self.options.expiry.as_millis()).unwrap_or(u64::MAX));
        let mut connection = self.connection.clone();
        let reply = bounded(self.call_timeout, invocation.invoke_async(&mut connection)).await?;
        foreign_node(reply).map_err(unavailable)
    }
}

/// Reads the script's reply: `{}` or `{ name, store id, age in ms }`.
fn foreign_node(reply: Value) -> Result<Option<ForeignNode>, super::codec::CodecError> {
    let mut items = reply::array(reply)?.into_iter();
    let Some(name) = items.next() else { return Ok(None) };
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    let name = text(reply::bytes(name)?);
    let store_id = text(reply::bytes(reply::next(&mut items)?)?);
    let age_ms = u64::try_from(reply::int(&reply::next(&mut items)?)?).unwrap_or(0);
    Ok(Some(ForeignNode { name, store_id, seen_ago: Duration::from_millis(age_ms) }))
}
