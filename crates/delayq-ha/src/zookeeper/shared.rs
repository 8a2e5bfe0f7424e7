//! State shared between the election driver and the `ZookeeperLeadership` handle.
//!
//! The role signal and the leader term change together under one lock, so
//! `holds_leadership` turns false at the instant the fence is published.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::watch;
use zookeeper_client::Client;

use crate::{Role, RoleKind};

/// The leadership term this node holds, if any.
#[derive(Debug, Default)]
struct Term {
    /// The epoch of the term; `None` while not leading.
    epoch: Option<u64>,
    /// Leader work is allowed until this instant; renewed by round trips to ZooKeeper.
    lease_deadline: Option<Instant>,
}

/// What the driver publishes and the handle reads.
#[derive(Debug)]
pub(super) struct Shared {
    role: watch::Sender<Role>,
    /// Short critical sections only, never held across `.await`.
    term: Mutex<Term>,
    worker_id: AtomicU16,
    /// The client of the live session, for `ping`; `None` between sessions.
    client: Mutex<Option<Client>>,
    /// Turns true once the first connection attempt has an outcome (worker id claimed or failed).
    settled: watch::Sender<bool>,
}

impl Shared {
    /// Creates the shared state of a node that is not connected yet.
    pub(super) fn new(provisional_worker_id: u16) -> Shared {
        let (role, _) = watch::channel(Role::disconnected());
        let (settled, _) = watch::channel(false);
        Shared {
            role,
            term: Mutex::new(Term::default()),
            worker_id: AtomicU16::new(provisional_worker_id),
            client: Mutex::new(None),
            settled,
        }
    }

    /// Returns a receiver of the role signal.
    pub(super) fn subscribe_role(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// Publishes an observed role; a `Leader` role starts (or continues) its term with a
    /// lease that ends at `lease_deadline`.
    pub(super) fn publish(&self, role: Role, lease_deadline: Instant) {
        let mut term = self.lock_term();
        if role.kind == RoleKind::Leader {
            if term.epoch != Some(role.epoch) {
                term.epoch = Some(role.epoch);
                term.lease_deadline = None;
            }
            term.lease_deadline = term.lease_deadline.max(Some(lease_deadline));
        } else {
            *term = Term::default();
        }
        self.role.send_if_modified(|current| replace_if_changed(current, role));
    }

    /// Stops leader work at once and publishes `Disconnected`, keeping the last known members.
    ///
    /// Returns the kind of the role it replaced, or `None` if the node was already fenced.
    pub(super) fn fence(&self) -> Option<RoleKind> {
        let mut term = self.lock_term();
        *term = Term::default();
        let mut replaced = None;
        self.role.send_if_modified(|current| {
            let fenced = Role { kind: RoleKind::Disconnected, leader: None, ..current.clone() };
            let previous_kind = current.kind;
            let changed = replace_if_changed(current, fenced);
            replaced = changed.then_some(previous_kind);
            changed
        });
        replaced
    }

    /// Extends the lease of term `epoch`, if this node still holds it.
    pub(super) fn renew_lease(&self, epoch: u64, lease_deadline: Instant) {
        let mut term = self.lock_term();
        if term.epoch == Some(epoch) {
            term.lease_deadline = term.lease_deadline.max(Some(lease_deadline));
        }
    }

    /// Returns whether this node holds term `epoch` and its lease has not lapsed.
    pub(super) fn holds_leadership(&self, epoch: u64) -> bool {
        let term = self.lock_term();
        let lease_valid = term.lease_deadline.is_some_and(|deadline| Instant::now() < deadline);
        term.epoch == Some(epoch) && lease_valid
    }

    /// Returns the worker id held (or, before the first claim, the one that will be tried first).
    pub(super) fn worker_id(&self) -> u16 {
        self.worker_id.load(Ordering::Relaxed)
    }

    /// Records the worker id claimed in ZooKeeper.
    pub(super) fn set_worker_id(&self, worker_id: u16) {
        self.worker_id.store(worker_id, Ordering::Relaxed);
    }

    /// Returns the client of the live session, if any.
    pub(super) fn client(&self) -> Option<Client> {
        self.client.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Sets or clears the client of the live session.
    pub(super) fn set_client(&self, client: Option<Client>) {
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = client;
    }

    /// Records that the first connection attempt has an outcome.
    pub(super) fn mark_settled(&self) {
        self.settled.send_if_modified(|settled| !std::mem::replace(settled, true));
    }

    /// Returns a receiver that turns true once the first connection attempt has an outcome.
    pub(super) fn subscribe_settled(&self) -> watch::Receiver<bool> {
        self.settled.subscribe()
    }

    fn lock_term(&self) -> MutexGuard<'_, Term> {
        self.term.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Replaces `current` with `next` and tells whether anything changed.
fn replace_if_changed(current: &mut Role, next: Role) -> bool {
    if *current == next {
        return false;
    }
    *current = next;
    true
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn leader(epoch: u64) -> Role {
        Role { kind: RoleKind::Leader, epoch, leader: Some("a".into()), members: vec!["a".into()] }
    }

    #[test]
    fn fence_ends_the_term_and_keeps_members() {
        let shared = Shared::new(3);
        let role = shared.subscribe_role();
        shared.publish(leader(7), Instant::now() + Duration::from_secs(5));
        assert!(shared.holds_leadership(7));
        assert!(!shared.holds_leadership(6));
        shared.fence();
        assert!(!shared.holds_leadership(7));
        let fenced = role.borrow().clone();
        assert_eq!(fenced.kind, RoleKind::Disconnected);
        assert_eq!((fenced.epoch, fenced.leader, fenced.members), (7, None, vec!["a".to_owned()]));
    }

    #[test]
    fn lapsed_lease_ends_leader_work_until_renewed() {
        let shared = Shared::new(3);
        shared.publish(leader(7), Instant::now());
        assert!(!shared.holds_leadership(7));
        shared.renew_lease(7, Instant::now() + Duration::from_secs(5));
        assert!(shared.holds_leadership(7));
        shared.renew_lease(8, Instant::now() + Duration::from_secs(50));
        shared.publish(Role { kind: RoleKind::Follower, ..leader(8) }, Instant::now());
        assert!(!shared.holds_leadership(7) && !shared.holds_leadership(8));
    }
}
