//! Standalone mode: no coordination, this node always leads.

use async_trait::async_trait;
use tokio::sync::watch;

use crate::{HaError, Leadership, Role};

/// The leadership of a node that runs alone (`DELAYQ_ZOOKEEPER` unset).
#[derive(Debug)]
pub struct Standalone {
    node_name: String,
    worker_id: u16,
    role: watch::Sender<Role>,
}

impl Standalone {
    /// Creates the standalone leadership; the worker id is taken modulo 1024.
    pub fn new(node_name: impl Into<String>, worker_id: u16) -> Standalone {
        let node_name = node_name.into();
        let (role, _) = watch::channel(Role::standalone(&node_name));
        Standalone { node_name, worker_id: worker_id % crate::WORKER_ID_COUNT, role }
    }
}

#[async_trait]
impl Leadership for Standalone {
    fn role(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    fn node_name(&self) -> &str {
        &self.node_name
    }

    fn worker_id(&self) -> u16 {
        self.worker_id
    }

    fn holds_leadership(&self, epoch: u64) -> bool {
        epoch == Role::STANDALONE_EPOCH
    }

    async fn ping(&self) -> Result<(), HaError> {
        Ok(())
    }

    async fn resign(&self) {}
}
