//! Starting up: standalone mode, an unreachable ZooKeeper (never blocks, no panic, role
//! `Disconnected`), and a ZooKeeper that becomes reachable later.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{config, remove_root, timed, unique_root, wait_kind, zk_proxy, zookeeper};
use delayq_ha::{HaError, Leadership, Role, RoleKind, Standalone, ZkConfig, ZookeeperLeadership};
use delayq_testkit::{free_port, Link};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn standalone_always_leads() {
    let standalone = Standalone::new("solo", 1030);
    let role = standalone.role().borrow().clone();
    assert_eq!(role, Role::standalone("solo"));
    assert!(role.is_leader());
    assert_eq!(standalone.worker_id(), 6);
    assert_eq!(standalone.node_name(), "solo");
    assert!(standalone.holds_leadership(Role::STANDALONE_EPOCH));
    standalone.ping().await.unwrap();
    standalone.resign().await;
    assert_eq!(standalone.role().borrow().kind, RoleKind::Standalone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_zookeeper_leaves_the_node_disconnected() {
    let closed_port = free_port();
    let config = ZkConfig {
        preferred_worker_id: Some(42),
        ..config(&format!("127.0.0.1:{closed_port}"), "/delayq-unreachable", "node-a")
    };
    let (started, startup) = timed(ZookeeperLeadership::start(config, CancellationToken::new())).await;
    let node = started.unwrap();
    assert!(startup < Duration::from_secs(3), "start blocked for {startup:?}");
    assert_eq!(*node.role().borrow(), Role::disconnected());
    assert_eq!(node.worker_id(), 42, "the preferred id is used until zookeeper answers");
    assert!(matches!(node.ping().await, Err(HaError::NotConnected)));

    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(node.role().borrow().kind, RoleKind::Disconnected);
    assert!(!node.holds_leadership(0));
    let ((), resign) = timed(node.resign()).await;
    assert!(resign < Duration::from_secs(2), "resign took {resign:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_reachable_later_is_joined() {
    let Some(zk) = zookeeper() else { return };
    let root = unique_root();
    let proxy = zk_proxy(&zk, Link::Down).await;
    let (started, startup) = timed(ZookeeperLeadership::start(
        config(&proxy.address().to_string(), &root, "node-a"),
        CancellationToken::new(),
    ))
    .await;
    let node = started.unwrap();
    assert!(startup < Duration::from_secs(3), "start blocked for {startup:?}");
    assert_eq!(node.role().borrow().kind, RoleKind::Disconnected);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(node.role().borrow().kind, RoleKind::Disconnected);

    proxy.set(Link::Up);
    let role = wait_kind(&mut node.role(), RoleKind::Leader).await;
    assert_eq!(role.members, vec!["node-a".to_owned()]);
    node.ping().await.unwrap();
    node.resign().await;
    remove_root(&zk, &root).await;
}

#[tokio::test]
async fn invalid_config_is_refused() {
    let config = ZkConfig { root: "delayq".to_owned(), ..ZkConfig::new("127.0.0.1:2181", "node-a") };
    let refused = ZookeeperLeadership::start(config, CancellationToken::new()).await;
    assert!(matches!(refused, Err(HaError::Invalid { field: "root", .. })));
}
