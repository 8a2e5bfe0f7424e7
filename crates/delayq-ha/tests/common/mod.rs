//! Shared helpers of the ZooKeeper tests: the service gate, unique roots, waits with
//! deadlines, and a fault proxy in front of ZooKeeper.

#![allow(dead_code, clippy::unwrap_used, unreachable_pub)]

use std::future::Future;
use std::time::{Duration, Instant};

use delayq_ha::{Leadership, Role, RoleKind, ZkConfig, ZookeeperLeadership};
use delayq_testkit::{FaultProxy, Link};
use tokio_util::sync::CancellationToken;
use zookeeper_client::Client;

/// The session timeout the tests ask for; ZooKeeper's minimum with tickTime 2000 is 4 s.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// A generous bound for anything that should take a few seconds.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Returns the ZooKeeper connect string, or `None` (test skipped) when it is not configured.
pub fn zookeeper() -> Option<String> {
    delayq_testkit::service("DELAYQ_TEST_ZOOKEEPER")
}

/// Returns a root path no other test (or test run) uses.
pub fn unique_root() -> String {
    format!("/{}", delayq_testkit::unique_name("delayq-test"))
}

/// Starts a fault proxy in front of the first server of the connect string `zk`,
/// with the link in state `link`; a node given its address reaches ZooKeeper
/// only through it.
pub async fn zk_proxy(zk: &str, link: Link) -> FaultProxy {
    let first_server = zk.split(',').next().unwrap_or_default();
    FaultProxy::start(first_server, link).await
}

/// Returns a test config: unique root given, short session timeout.
pub fn config(connect: &str, root: &str, node_name: &str) -> ZkConfig {
    ZkConfig { root: root.to_owned(), session_timeout: SESSION_TIMEOUT, ..ZkConfig::new(connect, node_name) }
}

/// Starts a candidate with a fresh cancellation token.
pub async fn start(config: ZkConfig) -> ZookeeperLeadership {
    ZookeeperLeadership::start(config, CancellationToken::new()).await.unwrap()
}

/// Waits until the value of `watch` (a role, or a recorder's history) satisfies
/// `accept` and returns that value.
pub async fn wait_watch<T: Clone + std::fmt::Debug>(
    watch: &mut tokio::sync::watch::Receiver<T>,
    what: &str,
    accept: impl FnMut(&T) -> bool,
) -> T {
    let found = match tokio::time::timeout(DEADLINE, watch.wait_for(accept)).await {
        Ok(Ok(found)) => Some(found.clone()),
        Ok(Err(_)) => panic!("channel closed while waiting for {what}"),
        Err(_) => None,
    };
    found.unwrap_or_else(|| panic!("timed out after {DEADLINE:?} waiting for {what}, last value {:?}", *watch.borrow()))
}

/// Waits until `role` is `kind`.
pub async fn wait_kind(role: &mut tokio::sync::watch::Receiver<Role>, kind: RoleKind) -> Role {
    wait_watch(role, &format!("{kind:?}"), |role| role.kind == kind).await
}

/// Runs `future` and returns how long it took.
pub async fn timed<T>(future: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let output = future.await;
    (output, started.elapsed())
}

/// Resigns every candidate of `nodes`, one after another.
pub async fn resign_all(nodes: &[ZookeeperLeadership]) {
    for node in nodes {
        node.resign().await;
    }
}

/// Deletes the test's own root recursively (best effort; ephemeral nodes are gone already).
pub async fn remove_root(connect: &str, root: &str) {
    let Ok(client) = Client::connect(connect).await else {
        return;
    };
    let mut pending = vec![root.to_owned()];
    let mut ordered = Vec::new();
    while let Some(path) = pending.pop() {
        let children = client.list_children(&path).await.unwrap_or_default();
        pending.extend(children.into_iter().map(|child| format!("{path}/{child}")));
        ordered.push(path);
    }
    for path in ordered.into_iter().rev() {
        let _ = client.delete(&path, None).await;
    }
}

/// A role and the instant a recorder saw it.
pub type Seen = (Instant, Role);

/// Records every role a receiver sees (after the current one) until finished.
pub struct RoleRecorder {
    stop: CancellationToken,
    seen: tokio::sync::watch::Receiver<Vec<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl RoleRecorder {
    /// Starts recording the changes of `role`.
    pub fn start(mut role: tokio::sync::watch::Receiver<Role>) -> RoleRecorder {
        role.mark_unchanged();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let (record, seen) = tokio::sync::watch::channel(Vec::new());
        let task = tokio::spawn(async move {
            let push = |role: &mut tokio::sync::watch::Receiver<Role>| {
                let now = Instant::now();
                let latest = role.borrow_and_update().clone();
                record.send_modify(|seen| seen.push((now, latest)));
            };
            loop {
                // A change already made is recorded before a stop is honoured:
                // `finish` right after a role changed still sees that change.
                tokio::select! {
                    biased;
                    changed = role.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        push(&mut role);
                    }
                    () = stopped.cancelled() => {
                        // A watch channel wakes its receivers one after another, so the
                        // stop can arrive before the wakeup of a change made just before it.
                        if role.has_changed().unwrap_or(false) {
                            push(&mut role);
                        }
                        return;
                    }
                }
            }
        });
        RoleRecorder { stop, seen, task }
    }

    /// Waits until the recorder has seen a role of `kind` and returns the first such
    /// role with the instant it was seen.
    ///
    /// Waiting on the recorder itself, not on a receiver of its own, keeps the test from
    /// going on before the recorder has the change.
    pub async fn wait_kind(&mut self, kind: RoleKind) -> Seen {
        let is_kind = |(_, role): &Seen| role.kind == kind;
        let what = format!("{kind:?} on the recorder");
        let seen = wait_watch(&mut self.seen, &what, |seen| seen.iter().any(is_kind)).await;
        seen.into_iter().find(is_kind).unwrap()
    }

    /// Stops recording and returns what was seen, with the time each role was seen.
    pub async fn finish(self) -> Vec<Seen> {
        self.stop.cancel();
        self.task.await.unwrap();
        self.seen.borrow().clone()
    }
}
