//! The high-availability harness: a private ZooKeeper, the backends three
//! nodes share, the nodes themselves, and what they say about their cluster.

#![allow(dead_code, unreachable_pub)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use delayq_testkit::{eventually, service};
use sqlx::Connection;

use crate::common::{self, unique_name, Client, Server};

/// The session timeout the nodes ask for.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// The private ZooKeeper's tick: sessions of 4 s are allowed and expire within a tick of it.
pub const ZOOKEEPER_TICK_MS: u64 = 500;
/// The ZooKeeper server jar of the Debian package (its manifest names the other jars).
pub const ZOOKEEPER_CLASSPATH: &str = "/usr/share/java/zookeeper.jar";
pub const NODE_NAMES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// A generous bound for anything that should take a few seconds.
pub const SETTLE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// A private ZooKeeper

/// A ZooKeeper server process this test owns; killed when dropped.
pub struct PrivateZookeeper {
    child: Option<Child>,
    port: u16,
    data_dir: PathBuf,
    log_path: PathBuf,
}

impl PrivateZookeeper {
    /// Starts a standalone server on a free port, keeping its data in `dir`.
    pub async fn start(dir: &Path) -> PrivateZookeeper {
        let port = common::free_port();
        let mut zookeeper = PrivateZookeeper {
            child: None,
            port,
            data_dir: dir.join("zookeeper-data"),
            log_path: dir.join("zookeeper.log"),
        };
        zookeeper.spawn().await;
        zookeeper
    }

    /// Starts the server process (again) on the same port and data directory.
    pub async fn spawn(&mut self) {
        assert!(self.child.is_none(), "zookeeper is already running");
        let classpath = std::env::var("DELAYQ_TEST_ZOOKEEPER_CLASSPATH").unwrap_or_else(|_| ZOOKEEPER_CLASSPATH.into());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log_path).expect("zookeeper log");
        let child = Command::new("java")
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-Dzookeeper.admin.enableServer=false", "-cp", &classpath])
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(self.port.to_string())
            .arg(&self.data_dir)
            .arg(ZOOKEEPER_TICK_MS.to_string())
            .stdout(Stdio::from(log.try_clone().expect("log handle")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start java: is the zookeeper package installed?");
        self.child = Some(child);
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self.child.as_mut().and_then(|child| child.try_wait().ok().flatten());
            assert!(exited.is_none(), "zookeeper exited: {exited:?}; log: {}", self.log());
            assert!(started.elapsed() < SETTLE, "zookeeper did not listen on {}; log: {}", self.port, self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills the server with SIGKILL and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for PrivateZookeeper {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// A cluster of three nodes

/// What the nodes share: Redis and a fresh MariaDB database.
pub struct Backends {
    redis_url: String,
    mysql_root_url: String,
    database: String,
    database_url: String,
    prefix: String,
}

impl Backends {
    /// Returns the backends, or `None` when a service is not configured (test skipped).
    pub async fn create(stem: &str) -> Option<Backends> {
        let redis_url = service("DELAYQ_TEST_REDIS_URL")?;
        let mysql_root_url = service("DELAYQ_TEST_MYSQL_URL")?;
        // The private ZooKeeper needs the installed package, which this variable vouches for.
        service("DELAYQ_TEST_ZOOKEEPER")?;
        let name = unique_name(stem);
        let database_url = common::fresh_database(&mysql_root_url, &name, None).await;
        Some(Backends { redis_url, mysql_root_url, database: name.clone(), database_url, prefix: name })
    }

    pub async fn connect(&self) -> sqlx::MySqlConnection {
        sqlx::MySqlConnection::connect(&self.database_url).await.expect("connect to the test database")
    }

    /// Drops the test database.
    pub async fn drop_database(&self) {
        if let Ok(mut connection) = sqlx::MySqlConnection::connect(&self.mysql_root_url).await {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS `{}`", self.database)).execute(&mut connection).await;
        }
    }
}

/// One node: its process (gone once killed) and a client that gives up on a frozen one.
pub struct Node {
    pub name: &'static str,
    pub server: Option<Server>,
    pub client: Client,
}

impl Node {
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("node is running")
    }
}

/// Starts the three nodes.
pub async fn start_nodes(dir: &Path, backends: &Backends, zookeeper: &str) -> Vec<Node> {
    let root = format!("/{}", backends.prefix);
    let session_ms = SESSION_TIMEOUT.as_millis().to_string();
    let start = |name: &'static str| {
        let node_dir = common::node_dir(dir, name);
        let env: Vec<(&str, String)> = vec![
            ("DELAYQ_REDIS_URL", backends.redis_url.clone()),
            ("DELAYQ_DATABASE_URL", backends.database_url.clone()),
            ("DELAYQ_SCHEDULER__REDIS_PREFIX", backends.prefix.clone()),
            ("DELAYQ_ZOOKEEPER", zookeeper.to_owned()),
            ("DELAYQ_ZOOKEEPER__ROOT", root.clone()),
            ("DELAYQ_ZOOKEEPER__SESSION_TIMEOUT_MS", session_ms.clone()),
            ("DELAYQ_NODE_ID", name.to_owned()),
        ];
        async move {
            let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
            let server = Server::start(&node_dir, &env).await;
            let client = Client::with_timeout(&server.base_url, Duration::from_secs(3));
            Node { name, server: Some(server), client }
        }
    };
    // The first node applies the schema to the fresh database; the others start together.
    let a = start(NODE_NAMES[0]).await;
    let (b, c) = tokio::join!(start(NODE_NAMES[1]), start(NODE_NAMES[2]));
    vec![a, b, c]
}

/// What `/stats` says about the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub role: String,
    pub leader: Option<String>,
    pub members: Vec<String>,
}

/// Reads a node's view; `None` when it does not answer.
pub async fn view(client: &Client) -> Option<View> {
    let Ok((200, stats)) = client.get("/stats").await else {
        return None;
    };
    let data = &stats["data"];
    let members = data["members"].as_array()?.iter().filter_map(|member| member.as_str().map(str::to_owned)).collect();
    Some(View { role: data["role"].as_str()?.to_owned(), leader: data["leader"].as_str().map(str::to_owned), members })
}

/// Returns the index of the leader when exactly one of `indices` leads, every other one
/// follows it, and all list `members` (when given).
pub async fn agreed_leader(nodes: &[Node], indices: &[usize], members: Option<&[&str]>) -> Option<usize> {
    let mut views = Vec::new();
    for &index in indices {
        views.push((index, view(&nodes[index].client).await?));
    }
    let leaders: Vec<usize> = views.iter().filter(|(_, view)| view.role == "leader").map(|(index, _)| *index).collect();
    let [leader] = leaders[..] else {
        return None;
    };
    let agreed = views.iter().all(|(index, view)| {
        let role_fits = *index == leader || view.role == "follower";
        let members_fit = members.is_none_or(|members| view.members == members);
        role_fits && members_fit && view.leader.as_deref() == Some(nodes[leader].name)
    });
    agreed.then_some(leader)
}

/// Polls until the nodes at `indices` agree on one leader; returns it.
pub async fn wait_for_leader(nodes: &[Node], indices: &[usize], members: Option<&[&str]>, within: Duration) -> usize {
    if let Some(leader) = eventually(within, || agreed_leader(nodes, indices, members)).await {
        return leader;
    }
    let mut views = Vec::new();
    for &index in indices {
        views.push((nodes[index].name, view(&nodes[index].client).await));
    }
    panic!("no agreed leader within {within:?}: {views:?}");
}
