//! The `Leadership` seam: who may run leader work, and the fencing token it carries.

use async_trait::async_trait;
use tokio::sync::watch;

use crate::{HaError, Role};

/// Decides which node runs leader work (timer, TTR reaper, restore, forwarders).
///
/// Contract every implementation keeps:
/// - `role()` always holds the current role; at most one live node publishes `Leader` for a
///   given cluster at any time, as far as its coordination service can tell.
/// - A node stops publishing `Leader` as soon as it can no longer be sure it leads (for
///   ZooKeeper: on connection loss, long before the session can expire and a successor be
///   elected).
/// - Each new leadership term carries a strictly greater `epoch` than every earlier term.
/// - `holds_leadership(epoch)` is the synchronous check leader work makes before each batch;
///   it turns false at the same moment the role stops being `Leader`, and also when the
///   leader lease lapses (e.g. after the process was frozen).
/// - `worker_id()` is a snowflake worker id no other live node holds.
#[async_trait]
pub trait Leadership: Send + Sync {
    /// Returns a receiver of the role signal; it sees every later change.
    fn role(&self) -> watch::Receiver<Role>;

    /// Returns this node's name, as listed in the members.
    fn node_name(&self) -> &str;

    /// Returns this node's snowflake worker id (0..1024).
    fn worker_id(&self) -> u16;

    /// Returns whether this node leads right now in term `epoch`.
    fn holds_leadership(&self, epoch: u64) -> bool;

    /// Checks the coordination service with one round trip, for readiness probes.
    ///
    /// # Errors
    /// `NotConnected`, `Timeout` or `Unavailable` when the coordination service cannot be reached.
    async fn ping(&self) -> Result<(), HaError>;

    /// Leaves the cluster: stops leading, deletes this node's registrations and closes the
    /// session. Bounded in time; the role ends as `Disconnected` (or stays `Standalone`).
    async fn resign(&self);
}
