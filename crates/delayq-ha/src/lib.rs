//! Decides which delayq node runs leader work: standalone, or elected through ZooKeeper, with
//! a watch-driven role signal and an epoch that fences stale leaders.
//!
//! Must not run jobs itself: it only tells the core when to start and stop leader work.
//!
//! Layout:
//! - `role`: [`Role`] and [`RoleKind`], the value of the role signal.
//! - `leadership`: the [`Leadership`] trait the core holds as `Arc<dyn Leadership>`.
//! - `standalone`: [`Standalone`], always the leader, for a node without ZooKeeper.
//! - `zookeeper`: [`ZookeeperLeadership`] and [`ZkConfig`]: election by ephemeral sequential
//!   nodes, member registry, worker id claims, fencing on connection loss.
//! - `error`: [`HaError`].
//!
//! Using it: hold an `Arc<dyn Leadership>`; start leader work when `role()` turns `Leader` or
//! `Standalone` and stop it when it turns anything else or its `epoch` changes; stamp leader
//! writes with that epoch and check `holds_leadership(epoch)` before each batch.

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

mod error;
mod leadership;
mod role;
mod standalone;
mod zookeeper;

pub use error::HaError;
pub use leadership::Leadership;
pub use role::{Role, RoleKind};
pub use standalone::Standalone;
pub use zookeeper::{ZkConfig, ZookeeperLeadership, DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT};

/// The number of snowflake worker ids (10 bits).
pub const WORKER_ID_COUNT: u16 = 1024;
