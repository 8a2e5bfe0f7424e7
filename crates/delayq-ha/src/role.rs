//! The role signal: what this node is allowed to do right now.

use serde::Serialize;

/// What this node currently is in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleKind {
    /// No coordination is configured: the only node, treated as the leader.
    Standalone,
    /// Elected leader: runs the timer, the TTR reaper, restore and the forwarders.
    Leader,
    /// Connected to ZooKeeper, another node (or nobody yet) leads.
    Follower,
    /// Not connected to ZooKeeper, or shut down: must not do leader work.
    Disconnected,
}

/// A snapshot of this node's role, published through a `tokio::sync::watch` channel.
///
/// Every `Leader` role carries an epoch greater than the epoch of any earlier leader, so the
/// epoch is a fencing token: leader work stamps its writes with it and a backend refuses writes
/// whose epoch is lower than one it has already seen.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Role {
    /// What this node is.
    pub kind: RoleKind,
    /// The fencing token of the leadership this role refers to: this node's term when
    /// `kind` is `Leader`, the observed leader's term when `Follower`, the last known term
    /// (or 0) when `Disconnected`; `Standalone` always has [`Role::STANDALONE_EPOCH`].
    pub epoch: u64,
    /// The leader's node name, when one is known.
    pub leader: Option<String>,
    /// The node names of the live members, sorted.
    pub members: Vec<String>,
}

impl Role {
    /// The epoch of a standalone node, which never changes.
    pub const STANDALONE_EPOCH: u64 = 1;

    /// Returns the role of a standalone node: the leader of a cluster of one.
    pub fn standalone(node_name: &str) -> Role {
        Role {
            kind: RoleKind::Standalone,
            epoch: Role::STANDALONE_EPOCH,
            leader: Some(node_name.to_owned()),
            members: vec![node_name.to_owned()],
        }
    }

    /// Returns the role of a node that knows nothing about the cluster yet.
    pub fn disconnected() -> Role {
        Role { kind: RoleKind::Disconnected, epoch: 0, leader: None, members: Vec::new() }
    }

    /// Returns whether this role allows leader work (`Leader` or `Standalone`).
    pub fn is_leader(&self) -> bool {
        matches!(self.kind, RoleKind::Leader | RoleKind::Standalone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_leader_and_standalone_may_lead() {
        assert!(Role::standalone("a").is_leader());
        assert!(!Role::disconnected().is_leader());
        let follower = Role { kind: RoleKind::Follower, ..Role::standalone("a") };
        assert!(!follower.is_leader());
    }
}
