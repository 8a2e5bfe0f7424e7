//! Leader work: the timer, recovery, the fan-out to consumer groups and the
//! forwarder run only while this node
//! leads (or is standalone). They stop when the role signal says otherwise, and
//! pause while the leader's lease has lapsed (each checks it before every round).

use std::sync::Arc;

use delayq_controller::{Role as ApiRole, RoleInfo, RoleProvider};
use delayq_forward::{run_forwarder_fenced, RouteTable};
use delayq_ha::{Leadership, Role, RoleKind};
use delayq_queue::{run_fan_out, run_loader, run_recovery, run_timer_fenced, DelayQueue, RecoveryOptions};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// The leader work running for one term: every task stops with `stop`.
struct Term {
    epoch: u64,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Term {
    async fn end(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
        info!(epoch = self.epoch, "leader work stopped");
    }
}

/// Starts and stops leader work as the role changes, until `cancel` fires.
pub(crate) async fn supervise(
    leadership: Arc<dyn Leadership>,
    queue: Arc<DelayQueue>,
    routes: Arc<RouteTable>,
    cancel: CancellationToken,
) {
    let mut role = leadership.role();
    let mut term: Option<Term> = None;
    loop {
        let current = role.borrow_and_update().clone();
        let wanted_epoch = current.is_leader().then_some(current.epoch);
        if term.as_ref().map(|term| term.epoch) != wanted_epoch {
            if let Some(previous) = term.take() {
                previous.end().await;
            }
            if let Some(epoch) = wanted_epoch {
                let (leadership, queue, routes) = (Arc::clone(&leadership), Arc::clone(&queue), Arc::clone(&routes));
                term = Some(start_term(leadership, queue, routes, epoch, cancel.child_token()));
            }
        }
        tokio::select! {
            () = cancel.cancelled() => break,
            changed = role.changed() => if changed.is_err() { break },
        }
    }
    if let Some(term) = term {
        term.end().await;
    }
}

fn start_term(
    leadership: Arc<dyn Leadership>,
    queue: Arc<DelayQueue>,
    routes: Arc<RouteTable>,
    epoch: u64,
    stop: CancellationToken,
) -> Term {
    info!(epoch, "leader work starts");
    queue.scheduler().fence(epoch);
    let mut tasks = Vec::new();
    let token = stop.clone();
    let fence = Arc::clone(&leadership);
    tasks.push(tokio::spawn(run_timer_fenced(Arc::clone(&queue), token, move || fence.holds_leadership(epoch))));
    let recovery_fence = Arc::clone(&leadership);
    let still_leading = move || recovery_fence.holds_leadership(epoch);
    tasks.push(tokio::spawn(run_recovery(Arc::clone(&queue), stop.clone(), still_leading, RecoveryOptions::default())));
    let loader_fence = Arc::clone(&leadership);
    let may_load = move || loader_fence.holds_leadership(epoch);
    tasks.push(tokio::spawn(run_loader(Arc::clone(&queue), stop.clone(), may_load)));
    let fan_out_fence = Arc::clone(&leadership);
    let may_fan_out = move || fan_out_fence.holds_leadership(epoch);
    tasks.push(tokio::spawn(run_fan_out(Arc::clone(&queue), stop.clone(), may_fan_out)));
    let forward_fence = Arc::clone(&leadership);
    let may_forward = move || forward_fence.holds_leadership(epoch);
    tasks.push(tokio::spawn(run_forwarder_fenced(Arc::clone(&queue), routes, stop.clone(), may_forward)));
    Term { epoch, stop, tasks }
}

/// Returns the `/stats` view of the role signal.
///
/// A leader whose lease has lapsed (say the process was frozen past its session) shows as
/// disconnected until the election catches up: it cannot be sure it still leads.
pub(crate) fn role_provider(leadership: &Arc<dyn Leadership>, coordinator: Option<&'static str>) -> RoleProvider {
    let role = leadership.role();
    let lease = Arc::clone(leadership);
    Arc::new(move || {
        let current = role.borrow().clone();
        if current.kind == RoleKind::Leader && !lease.holds_leadership(current.epoch) {
            let in_doubt = Role { kind: RoleKind::Disconnected, leader: None, ..current };
            return api_role(&in_doubt, coordinator);
        }
        api_role(&current, coordinator)
    })
}

fn api_role(role: &Role, coordinator: Option<&'static str>) -> RoleInfo {
    let kind = match role.kind {
        RoleKind::Standalone => ApiRole::Standalone,
        RoleKind::Leader => ApiRole::Leader,
        RoleKind::Follower => ApiRole::Follower,
        RoleKind::Disconnected => ApiRole::Disconnected,
    };
    RoleInfo { role: kind, leader: role.leader.clone(), members: role.members.clone(), coordinator }
}
