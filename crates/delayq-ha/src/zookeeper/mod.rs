//! ZooKeeper leader election with a watch-driven role signal and fencing.

mod driver;
mod guard;
mod paths;
mod registration;
mod session;
mod shared;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::warn;

use self::shared::Shared;
use crate::{HaError, Leadership, Role, RoleKind};

/// The default root of delayq's nodes in ZooKeeper.
pub const DEFAULT_ROOT: &str = delayq_common::defaults::DEFAULT_ZOOKEEPER_ROOT;
/// The default session timeout; ZooKeeper clamps it to `[2, 20] × tickTime`.
pub const DEFAULT_SESSION_TIMEOUT: Duration =
    Duration::from_millis(delayq_common::defaults::DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS);
/// How long `ping` waits for ZooKeeper.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Where and how to take part in the election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkConfig {
    /// The connect string, e.g. `zk1:2181,zk2:2181`.
    pub connect: String,
    /// The root path of delayq's nodes, absolute, without a trailing slash.
    pub root: String,
    /// The session timeout to negotiate; a partitioned leader steps down well within it.
    pub session_timeout: Duration,
    /// This node's name, unique in the cluster.
    pub node_name: String,
    /// The worker id to try first (e.g. the one derived from the node name); by default a
    /// hash of the node name. Taken modulo 1024.
    pub preferred_worker_id: Option<u16>,
}

impl ZkConfig {
    /// Returns a config with the default root and session timeout.
    pub fn new(connect: impl Into<String>, node_name: impl Into<String>) -> ZkConfig {
        ZkConfig {
            connect: connect.into(),
            root: DEFAULT_ROOT.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            node_name: node_name.into(),
            preferred_worker_id: None,
        }
    }

    fn validate(&self) -> Result<(), HaError> {
        let invalid = |field, reason: &str| Err(HaError::Invalid { field, reason: reason.to_owned() });
        if self.connect.trim().is_empty() {
            return invalid("connect", "must name at least one server");
        }
        let root_is_valid =
            self.root.starts_with('/') && self.root.len() > 1 && !self.root.ends_with('/') && !self.root.contains("//");
        if !root_is_valid {
            return invalid("root", "must be an absolute path like /delayq, without a trailing slash");
        }
        let name_is_valid = !self.node_name.is_empty()
            && self.node_name.trim() == self.node_name
            && !self.node_name.contains('/')
            && self.node_name != "."
            && self.node_name != "..";
        if !name_is_valid {
            return invalid("node_name", "must be non-empty, without slashes or surrounding spaces");
        }
        if self.session_timeout < Duration::from_millis(100) {
            return invalid("session_timeout", "must be at least 100ms");
        }
        Ok(())
    }

    fn first_worker_id(&self) -> u16 {
        match self.preferred_worker_id {
            Some(worker_id) => worker_id % crate::WORKER_ID_COUNT,
            None => paths::hashed_worker_id(&self.node_name),
        }
    }
}

/// Leadership through ZooKeeper: ephemeral sequential election nodes, the lowest leads.
///
/// A background task keeps the node in the election: it reconnects with backoff, replaces
/// expired sessions and re-enters the election. Dropping the handle stops that task too.
#[derive(Debug)]
pub struct ZookeeperLeadership {
    node_name: String,
    root: String,
    shared: Arc<Shared>,
    stop: CancellationToken,
    driver: Mutex<Option<JoinHandle<()>>>,
    _stop_on_drop: DropGuard,
}

impl ZookeeperLeadership {
    /// Starts taking part in the election under `config.root`; stops when `cancel` fires.
    ///
    /// Waits at most about one session timeout for the first connection attempt, so that
    /// `worker_id` is the one ZooKeeper handed out. When ZooKeeper is unreachable it returns
    /// with role `Disconnected` and keeps retrying in the background.
    ///
    /// # Errors
    /// `Invalid` when the config cannot work; never for an unreachable ZooKeeper.
    pub async fn start(config: ZkConfig, cancel: CancellationToken) -> Result<ZookeeperLeadership, HaError> {
        config.validate()?;
        let shared = Arc::new(Shared::new(config.first_worker_id()));
        let stop = cancel.child_token();
        let mut settled = shared.subscribe_settled();
        let startup_wait = config.session_timeout + Duration::from_secs(1);
        let leadership = ZookeeperLeadership {
            node_name: config.node_name.clone(),
            root: config.root.clone(),
            shared: Arc::clone(&shared),
            stop: stop.clone(),
            driver: Mutex::new(None),
            _stop_on_drop: stop.clone().drop_guard(),
        };
        let driver = tokio::spawn(driver::run(config, shared, stop));
        *leadership.driver.lock().unwrap_or_else(PoisonError::into_inner) = Some(driver);
        if tokio::time::timeout(startup_wait, settled.wait_for(|settled| *settled)).await.is_err() {
            warn!("zookeeper did not answer during startup, continuing in the background");
        }
        Ok(leadership)
    }
}

#[async_trait]
impl Leadership for ZookeeperLeadership {
    fn role(&self) -> watch::Receiver<Role> {
        self.shared.subscribe_role()
    }

    fn node_name(&self) -> &str {
        &self.node_name
    }

    fn worker_id(&self) -> u16 {
        self.shared.worker_id()
    }

    fn holds_leadership(&self, epoch: u64) -> bool {
        self.shared.holds_leadership(epoch)
    }

    async fn ping(&self) -> Result<(), HaError> {
        let disconnected = self.shared.subscribe_role().borrow().kind == RoleKind::Disconnected;
        let client = self.shared.client().filter(|_| !disconnected);
        let Some(client) = client else {
            return Err(HaError::NotConnected);
        };
        match tokio::time::timeout(PING_TIMEOUT, client.check_stat(&self.root)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(HaError::Unavailable { source }),
            Err(_) => Err(HaError::Timeout(PING_TIMEOUT)),
        }
    }

    async fn resign(&self) {
        self.stop.cancel();
        let driver = self.driver.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(driver) = driver else {
            return;
        };
        if let Err(err) = driver.await {
            warn!(cause = %err, "zookeeper election task failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_rejects_unusable_roots_and_names() {
        let valid = ZkConfig::new("127.0.0.1:2181", "node-a");
        assert!(valid.validate().is_ok());
        for root in ["", "/", "delayq", "/delayq/", "/a//b"] {
            let config = ZkConfig { root: root.to_owned(), ..valid.clone() };
            assert!(config.validate().is_err(), "root {root:?} accepted");
        }
        for name in ["", "a/b", " a", ".."] {
            let config = ZkConfig { node_name: name.to_owned(), ..valid.clone() };
            assert!(config.validate().is_err(), "name {name:?} accepted");
        }
    }

    #[test]
    fn preferred_worker_id_wraps_into_range() {
        let config = ZkConfig { preferred_worker_id: Some(1030), ..ZkConfig::new("zk:2181", "a") };
        assert_eq!(config.first_worker_id(), 6);
    }
}
