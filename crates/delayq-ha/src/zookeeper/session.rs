//! One ZooKeeper session: register, run election rounds, and wait for the next change.
//!
//! A round reads the election, publishes the role and then waits on the watches that can
//! change it: its predecessor's election node only (when a candidate goes, only its successor
//! looks at the election again: no herd), the leader announcement (the leader's name and
//! epoch, for the role signal) and the member list. Every operation runs under the
//! [`StateGuard`], which fences this node the moment the connection is lost.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use zookeeper_client::{Client, Error as ZkError, OneshotWatcher, SessionState};

use super::guard::{Interrupt, StateGuard};
use super::paths::{rank_candidates, Candidate, Paths};
use super::registration::{epoch_of, Registrar};
use super::shared::Shared;
use crate::{Role, RoleKind};

/// How long to wait before retrying a round ZooKeeper refused.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SessionEnd {
    /// The leadership is shutting down; the session is still usable for cleanup.
    Cancelled,
    /// The session expired or closed; a new one is needed.
    Ended,
}

/// The leader announcement as read from ZooKeeper.
#[derive(Debug)]
struct LeaderNode {
    name: String,
    epoch: u64,
    owner: i64,
}

/// One session's election state.
pub(super) struct Session<'a> {
    client: Client,
    guard: StateGuard<'a>,
    shared: &'a Shared,
    paths: &'a Paths,
    node_name: &'a str,
    /// How long a leader may work after ZooKeeper last confirmed its session.
    lease_validity: Duration,
    registered: bool,
    worker_id: Option<u16>,
    candidate: Option<Candidate>,
    /// Fires when the predecessor's election node changes; `None` when none is watched.
    predecessor_gone: Option<WatchFuture>,
}

/// Where this node stands in the election after one look.
enum Standing {
    /// Lowest, and the announcement of term `epoch` is ours.
    Leader(u64),
    /// Behind a live predecessor (watched), or lowest behind a foreign announcement (watched).
    Waiting,
    /// The election changed while looking; look again.
    Changed,
}

/// A pending watch.
type WatchFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

impl<'a> Session<'a> {
    /// Wraps a freshly connected client.
    pub(super) fn new(
        client: Client,
        shared: &'a Shared,
        paths: &'a Paths,
        node_name: &'a str,
        cancel: &'a CancellationToken,
    ) -> Session<'a> {
        // The server expires the session no earlier than one timeout after it last heard from
        // us; two thirds of it leaves room for clock drift and for the successor's election.
        let lease_validity = client.session_timeout() * 2 / 3;
        let guard = StateGuard::new(client.state_watcher(), shared, cancel);
        Session {
            client,
            guard,
            shared,
            paths,
            node_name,
            lease_validity,
            registered: false,
            worker_id: None,
            candidate: None,
            predecessor_gone: None,
        }
    }

    /// Runs election rounds until the session ends or the leadership is cancelled.
    pub(super) async fn run(&mut self) -> SessionEnd {
        let mut outcome = Ok(());
        loop {
            if outcome.is_err() {
                // Look at the election afresh once the interruption is over.
                self.predecessor_gone = None;
            }
            outcome = match outcome {
                Ok(()) => self.round().await,
                Err(Interrupt::Cancelled) => return SessionEnd::Cancelled,
                Err(Interrupt::SessionEnded) => return SessionEnd::Ended,
                Err(Interrupt::Disconnected) => self.guard.wait_connected().await,
                Err(Interrupt::Refused(err)) => {
                    warn!(cause = %err, "zookeeper refused an election step, retrying");
                    self.step_back().await
                }
                Err(Interrupt::Stuck(reason)) => {
                    warn!(reason, "cannot take part in the election yet, retrying");
                    self.step_back().await
                }
            };
        }
    }

    /// Deletes this session's nodes so a successor need not wait for the session to expire.
    pub(super) async fn leave(&mut self) {
        let registrar = Registrar { client: &self.client, paths: self.paths, node_name: self.node_name };
        registrar.leave(self.candidate.as_ref(), self.worker_id).await;
    }

    /// Reads the election, publishes the role and waits for something that may change it.
    async fn round(&mut self) -> Result<(), Interrupt> {
        let round_started = Instant::now();
        self.register().await?;
        let own_epoch = match self.stand().await? {
            Standing::Leader(epoch) => Some(epoch),
            Standing::Waiting => None,
            Standing::Changed => return Ok(()),
        };
        let (leader, leader_watch) = self.observe_leader().await?;
        let (members, members_watch) = self.observe_members().await?;
        if !members.iter().any(|member| member == self.node_name) {
            self.registered = false;
            return Ok(());
        }
        let Some(role) = self.decide_role(own_epoch, leader, members).await? else {
            return Ok(());
        };
        if self.client.state() != SessionState::SyncConnected {
            return Err(self.guard.interrupt_for(ZkError::ConnectionLoss));
        }
        log_role_change(&self.shared.subscribe_role().borrow(), &role);
        self.shared.publish(role, round_started.into_std() + self.lease_validity);
        self.wait_for_change(own_epoch, leader_watch, members_watch).await
    }

    /// Finds this node's place in the election: leads when lowest, else watches only its
    /// predecessor. While that watch is pending the election is not read again, so a change
    /// of leader or members costs a follower no listing of the election.
    async fn stand(&mut self) -> Result<Standing, Interrupt> {
        if self.predecessor_gone.is_some() {
            return Ok(Standing::Waiting);
        }
        let own = self.election_candidate().await?;
        let children = self.guard.call(self.client.list_children(&self.paths.election_dir)).await?;
        let ranked = rank_candidates(&children);
        let Some(position) = ranked.iter().position(|candidate| candidate.name == own.name) else {
            warn!(candidate = %own.name, "election node vanished, re-entering the election");
            self.candidate = None;
            return Ok(Standing::Changed);
        };
        let Some(predecessor) = position.checked_sub(1).and_then(|index| ranked.get(index)) else {
            let epoch = self.claim_leader(&own).await?;
            return Ok(epoch.map_or(Standing::Waiting, Standing::Leader));
        };
        let path = self.paths.election_node(&predecessor.name);
        let (stat, watcher) = self.guard.call(self.client.check_and_watch_stat(&path)).await?;
        if stat.is_none() {
            return Ok(Standing::Changed);
        }
        self.predecessor_gone = Some(Box::pin(async move {
            let _event = watcher.changed().await;
        }));
        Ok(Standing::Waiting)
    }

    /// Creates the layout, claims a worker id and registers the member, once per session.
    async fn register(&mut self) -> Result<(), Interrupt> {
        if self.registered {
            return Ok(());
        }
        let registrar = Registrar { client: &self.client, paths: self.paths, node_name: self.node_name };
        registrar.create_layout(&mut self.guard).await?;
        let preferred = self.shared.worker_id();
        let worker_id = registrar.claim_worker_id(&mut self.guard, preferred).await?;
        if worker_id != preferred {
            warn!(preferred, worker_id, "preferred snowflake worker id is held by another node");
        } else if self.worker_id.is_none() {
            info!(worker_id, "claimed snowflake worker id");
        }
        self.shared.set_worker_id(worker_id);
        self.worker_id = Some(worker_id);
        self.shared.mark_settled();
        registrar.register_member(&mut self.guard).await?;
        self.registered = true;
        Ok(())
    }

    /// Returns this session's election node, entering the election if needed.
    async fn election_candidate(&mut self) -> Result<Candidate, Interrupt> {
        if let Some(candidate) = &self.candidate {
            return Ok(candidate.clone());
        }
        let registrar = Registrar { client: &self.client, paths: self.paths, node_name: self.node_name };
        let candidate = registrar.enter_election(&mut self.guard).await?;
        self.candidate = Some(candidate.clone());
        Ok(candidate)
    }

    /// Announces this node as leader; see [`Registrar::claim_leader`].
    async fn claim_leader(&mut self, own: &Candidate) -> Result<Option<u64>, Interrupt> {
        let registrar = Registrar { client: &self.client, paths: self.paths, node_name: self.node_name };
        let shared = self.shared;
        let epoch = registrar.claim_leader(&mut self.guard, own, |epoch| shared.holds_leadership(epoch)).await?;
        if epoch.is_none() {
            info!("lowest in the election, waiting for the previous leader announcement to go");
        }
        Ok(epoch)
    }

    /// Reads the leader announcement and watches it (or its creation).
    async fn observe_leader(&mut self) -> Result<(Option<LeaderNode>, OneshotWatcher), Interrupt> {
        loop {
            match self.guard.call(self.client.get_and_watch_data(&self.paths.leader)).await {
                Ok((data, stat, watcher)) => {
                    let name = String::from_utf8_lossy(&data).into_owned();
                    let leader = LeaderNode { name, epoch: epoch_of(&stat), owner: stat.ephemeral_owner };
                    return Ok((Some(leader), watcher));
                }
                Err(Interrupt::Refused(ZkError::NoNode)) => {}
                Err(other) => return Err(other),
            }
            let (stat, watcher) = self.guard.call(self.client.check_and_watch_stat(&self.paths.leader)).await?;
            if stat.is_none() {
                return Ok((None, watcher));
            }
        }
    }

    /// Lists the members, sorted, and watches the list.
    async fn observe_members(&mut self) -> Result<(Vec<String>, OneshotWatcher), Interrupt> {
        let listing = self.client.list_and_watch_children(&self.paths.members_dir);
        let (mut members, watcher) = self.guard.call(listing).await?;
        members.sort_unstable();
        Ok((members, watcher))
    }

    /// Derives the role from one round's reads; `None` when they disagree and the round must
    /// be repeated (e.g. the announcement changed between two reads).
    async fn decide_role(
        &mut self,
        own_epoch: Option<u64>,
        leader: Option<LeaderNode>,
        members: Vec<String>,
    ) -> Result<Option<Role>, Interrupt> {
        let session_id = self.client.session_id().0;
        let leader_is_own_session = leader.as_ref().is_some_and(|leader| leader.owner == session_id);
        let role = match (own_epoch, leader) {
            (Some(epoch), Some(leader)) if leader_is_own_session && leader.epoch == epoch => {
                Role { kind: RoleKind::Leader, epoch, leader: Some(leader.name), members }
            }
            (Some(_), _) => return Ok(None),
            (None, Some(_)) if leader_is_own_session => {
                // An announcement of ours while another candidate is lowest: a stale term.
                let deleting = self.client.delete(&self.paths.leader, None);
                match self.guard.call(deleting).await {
                    Ok(()) | Err(Interrupt::Refused(ZkError::NoNode)) => return Ok(None),
                    Err(other) => return Err(other),
                }
            }
            (None, leader) => Role {
                kind: RoleKind::Follower,
                epoch: leader.as_ref().map_or(0, |leader| leader.epoch),
                leader: leader.map(|leader| leader.name),
                members,
            },
        };
        Ok(Some(role))
    }

    /// Waits until a watch fires; a leader meanwhile renews its lease.
    async fn wait_for_change(
        &mut self,
        own_epoch: Option<u64>,
        leader_watch: OneshotWatcher,
        members_watch: OneshotWatcher,
    ) -> Result<(), Interrupt> {
        let leader_changed = leader_watch.changed();
        let members_changed = members_watch.changed();
        tokio::pin!(leader_changed, members_changed);
        let renew_every = self.lease_validity / 4;
        let mut renewal = tokio::time::interval_at(Instant::now() + renew_every, renew_every);
        renewal.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                changed = self.guard.state_changed() => changed?,
                () = predecessor_gone(&mut self.predecessor_gone) => return Ok(()),
                _ = &mut leader_changed => return Ok(()),
                _ = &mut members_changed => return Ok(()),
                _ = renewal.tick(), if own_epoch.is_some() => {
                    let epoch = own_epoch.unwrap_or_default();
                    if !self.renew_lease(epoch).await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Confirms with one round trip that the announcement of term `epoch` is still ours.
    async fn renew_lease(&mut self, epoch: u64) -> Result<bool, Interrupt> {
        let sent_at = Instant::now();
        let stat = self.guard.call(self.client.check_stat(&self.paths.leader)).await?;
        let session_id = self.client.session_id().0;
        let still_ours = stat.is_some_and(|stat| stat.ephemeral_owner == session_id && epoch_of(&stat) == epoch);
        if still_ours {
            self.shared.renew_lease(epoch, sent_at.into_std() + self.lease_validity);
        }
        Ok(still_ours)
    }

    /// Stops leading while ZooKeeper refuses a step, then pauses before the next round.
    async fn step_back(&mut self) -> Result<(), Interrupt> {
        self.shared.fence();
        self.registered = false;
        self.guard.call_raw(tokio::time::sleep(RETRY_PAUSE)).await
    }
}

/// Waits for the predecessor watch in `slot`, if any, and clears it once it fired.
async fn predecessor_gone(slot: &mut Option<WatchFuture>) {
    match slot {
        Some(watch) => {
            watch.as_mut().await;
            *slot = None;
        }
        None => std::future::pending().await,
    }
}

/// Logs a change of kind, leader or epoch.
fn log_role_change(previous: &Role, next: &Role) {
    let changed = previous.kind != next.kind || previous.leader != next.leader || previous.epoch != next.epoch;
    if changed {
        info!(role = ?next.kind, epoch = next.epoch, leader = next.leader.as_deref().unwrap_or("-"), "leadership role changed");
    }
}
