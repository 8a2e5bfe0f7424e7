//! Election against a real ZooKeeper: one leader, agreement on leader and members,
//! hand-over with a higher epoch, and distinct worker ids.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{
    config, remove_root, resign_all, start, unique_root, wait_kind, wait_watch, zookeeper, RoleRecorder, DEADLINE,
};
use delayq_ha::{Leadership, RoleKind, ZkConfig, ZookeeperLeadership};
use delayq_testkit::eventually;

/// Starts candidates one after another, so the first one started leads.
async fn start_in_order(connect: &str, root: &str, names: &[&str]) -> Vec<ZookeeperLeadership> {
    let mut candidates = Vec::new();
    for name in names {
        let candidate = start(config(connect, root, name)).await;
        let mut role = candidate.role();
        wait_watch(&mut role, "a settled role", |role| role.kind != RoleKind::Disconnected).await;
        candidates.push(candidate);
    }
    candidates
}

/// The three candidates most checks start, in the order they start.
const THREE: [&str; 3] = ["node-a", "node-b", "node-c"];

/// Starts the [`THREE`] candidates in order and waits until they agree that
/// node-a leads them all; returns them and node-a's epoch.
async fn three_led_by_the_first(connect: &str, root: &str) -> (Vec<ZookeeperLeadership>, u64) {
    let nodes = start_in_order(connect, root, &THREE).await;
    let epoch = wait_agreement(&nodes.iter().collect::<Vec<_>>(), "node-a", &THREE).await;
    (nodes, epoch)
}

/// Waits until every candidate sees `leader` leading `members`, exactly one of them as leader.
async fn wait_agreement(candidates: &[&ZookeeperLeadership], leader: &str, members: &[&str]) -> u64 {
    let agreed_epoch = eventually(DEADLINE, || async {
        let roles: Vec<_> = candidates.iter().map(|candidate| candidate.role().borrow().clone()).collect();
        let leaders = roles.iter().filter(|role| role.kind == RoleKind::Leader).count();
        let followers = roles.iter().filter(|role| role.kind == RoleKind::Follower).count();
        let epochs: HashSet<u64> = roles.iter().map(|role| role.epoch).collect();
        let agreed = roles.iter().all(|role| role.leader.as_deref() == Some(leader) && role.members == members);
        (leaders == 1 && followers + 1 == roles.len() && epochs.len() == 1 && agreed).then(|| roles[0].epoch)
    })
    .await;
    agreed_epoch.unwrap_or_else(|| panic!("timed out after {DEADLINE:?} waiting for agreement on leader and members"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_candidate_becomes_leader() {
    let Some(zk) = zookeeper() else { return };
    let root = unique_root();
    let node = start(config(&zk, &root, "node-a")).await;
    let role = wait_kind(&mut node.role(), RoleKind::Leader).await;
    assert_eq!(role.leader.as_deref(), Some("node-a"));
    assert_eq!(role.members, vec!["node-a".to_owned()]);
    assert!(role.epoch > 0);
    assert!(node.holds_leadership(role.epoch));
    assert!(!node.holds_leadership(role.epoch + 1));
    node.ping().await.unwrap();
    node.resign().await;
    assert_eq!(node.role().borrow().kind, RoleKind::Disconnected);
    assert!(!node.holds_leadership(role.epoch));
    remove_root(&zk, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_candidates_elect_exactly_one_leader() {
    let Some(zk) = zookeeper() else { return };
    let root = unique_root();
    let (nodes, epoch) = three_led_by_the_first(&zk, &root).await;
    assert!(nodes[0].holds_leadership(epoch));
    assert!(!nodes[1].holds_leadership(epoch) && !nodes[2].holds_leadership(epoch));
    resign_all(&nodes).await;
    remove_root(&zk, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resigned_leader_hands_over_with_a_higher_epoch() {
    let Some(zk) = zookeeper() else { return };
    let root = unique_root();
    let (nodes, first_epoch) = three_led_by_the_first(&zk, &root).await;
    let all: Vec<&ZookeeperLeadership> = nodes.iter().collect();

    let ((), handover) = common::timed(async {
        nodes[0].resign().await;
        wait_agreement(&all[1..], "node-b", &["node-b", "node-c"]).await;
    })
    .await;
    let second_epoch = nodes[1].role().borrow().epoch;
    assert!(second_epoch > first_epoch, "epoch {second_epoch} not above {first_epoch}");
    assert!(handover < Duration::from_secs(5), "hand-over took {handover:?}");
    assert!(nodes[1].holds_leadership(second_epoch));
    assert!(!nodes[0].holds_leadership(first_epoch));

    nodes[1].resign().await;
    wait_agreement(&all[2..], "node-c", &["node-c"]).await;
    assert!(nodes[2].role().borrow().epoch > second_epoch);
    nodes[2].resign().await;
    remove_root(&zk, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_leader_hands_over() {
    let Some(zk) = zookeeper() else { return };
    let root = unique_root();
    let mut nodes = start_in_order(&zk, &root, &["node-a", "node-b"]).await;
    let first_epoch = wait_agreement(&nodes.iter().collect::<Vec<_>>(), "node-a", &["node-a", "node-b"]).await;
    drop(nodes.remove(0));
    let second_epoch = wait_agreement(&[&nodes[0]], "node-b", &["node-b"]).await;
    assert!(second_epoch > first_epoch);
    nodes[0].resign().await;
    remove_root(&zk, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn departing_follower_leaves_the_leader_alone() {
    let Some(zk) = zookeeper() else { return };
    let root = unique_root();
    let (nodes, epoch) = three_led_by_the_first(&zk, &root).await;
    let all: Vec<&ZookeeperLeadership> = nodes.iter().collect();
    let recorder = RoleRecorder::start(nodes[0].role());

    nodes[2].resign().await;
    let after = wait_agreement(&all[..2], "node-a", &["node-a", "node-b"]).await;
    assert_eq!(after, epoch, "the leader kept its term");
    assert!(nodes[0].holds_leadership(epoch));
    for (_, seen) in recorder.finish().await {
        assert_eq!((seen.kind, seen.epoch), (RoleKind::Leader, epoch), "the leader flapped");
    }
    resign_all(&nodes[..2]).await;
    remove_root(&zk, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_candidates_get_distinct_worker_ids() {
    let Some(zk) = zookeeper() else { return };
    let root = unique_root();
    let mut nodes = Vec::new();
    for name in ["node-a", "node-b", "node-c", "node-d"] {
        let config = ZkConfig { preferred_worker_id: Some(1022), ..config(&zk, &root, name) };
        nodes.push(start(config).await);
    }
    let ids: Vec<u16> = nodes.iter().map(|node| node.worker_id()).collect();
    assert_eq!(ids, vec![1022, 1023, 0, 1], "claims follow the preferred id and wrap around");

    nodes[1].resign().await;
    let config = ZkConfig { preferred_worker_id: Some(1022), ..config(&zk, &root, "node-e") };
    let newcomer = start(config).await;
    assert_eq!(newcomer.worker_id(), 1023, "a released id is handed out again");
    resign_all(&nodes).await;
    newcomer.resign().await;
    remove_root(&zk, &root).await;
}
