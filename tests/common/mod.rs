//! Starts a real `delayq serve` process on port 0 and talks to it over HTTP.

#![allow(dead_code, unused_imports, unreachable_pub, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running server process.
pub struct Server {
    child: Child,
    pub base_url: String,
    /// The gRPC address (`host:port`), or `off`.
    pub grpc_addr: String,
    pub data_dir: PathBuf,
    log_path: PathBuf,
}

impl Server {
    /// Starts `delayq serve` with its data in `data_dir`, plus extra environment.
    pub async fn start(data_dir: &Path, env: &[(&str, &str)]) -> Server {
        let log_path = data_dir.join(format!("server-{}.log", now_ms()));
        let log = std::fs::File::create(&log_path).expect("create server log");
        let mut command = serve_command(data_dir, env);
        command.stdout(Stdio::piped()).stderr(Stdio::from(log));
        let mut child = command.spawn().expect("spawn delayq serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("server did not announce itself; log: {}", read(&log_path)))
            .expect("read stdout")
            .unwrap_or_else(|| panic!("server exited before listening; log: {}", read(&log_path)));
        let http = line
            .strip_prefix("delayq listening http=")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let grpc_addr = line
            .split_once(" grpc=")
            .map(|(_, rest)| rest.trim().to_owned())
            .unwrap_or_else(|| panic!("the listening line names the grpc address: {line}"));
        // Keep draining stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Server { child, base_url: format!("http://{http}"), grpc_addr, data_dir: data_dir.to_owned(), log_path }
    }

    /// Returns the process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Sends a signal (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().to_string();
        let sent = std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Kills the process with SIGKILL and waits for it.
    pub async fn kill9(mut self) {
        self.child.kill().await.expect("kill -9");
    }

    /// Sends SIGTERM and waits for the exit; returns whether it exited successfully.
    pub async fn terminate(mut self) -> bool {
        let pid = self.pid().to_string();
        let sent = std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill -TERM");
        assert!(sent.success());
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("server stops within 30 s of SIGTERM")
            .expect("wait");
        status.success()
    }

    /// Returns the server's log so far.
    pub fn log(&self) -> String {
        read(&self.log_path)
    }

    pub fn client(&self) -> Client {
        Client::new(&self.base_url)
    }
}

/// A `delayq serve` command run in `data_dir`, on loopback ports the system
/// chooses, its data in `data_dir/data`, with `env` on top; killed when dropped.
fn serve_command(data_dir: &Path, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_delayq"));
    command
        .arg("serve")
        .current_dir(data_dir)
        .env("DELAYQ_HTTP_ADDR", "127.0.0.1:0")
        .env("DELAYQ_GRPC_ADDR", "127.0.0.1:0")
        .env("DELAYQ_DATA_DIR", data_dir.join("data"))
        .env("RUST_LOG", "info")
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Epoch milliseconds, the clock every delayq time uses.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as u64
}

/// A thin HTTP client returning (status, envelope).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base_url: String,
}

impl Client {
    pub fn new(base_url: &str) -> Client {
        let http = reqwest::Client::builder().pool_max_idle_per_host(64).build().expect("client");
        Client { http, base_url: base_url.to_owned() }
    }

    /// A client whose every request gives up after `timeout` (for servers that may be frozen).
    pub fn with_timeout(base_url: &str, timeout: Duration) -> Client {
        let http = reqwest::Client::builder().pool_max_idle_per_host(64).timeout(timeout).build().expect("client");
        Client { http, base_url: base_url.to_owned() }
    }

    pub async fn post(&self, path_and_query: &str, body: &Value) -> Result<(u16, Value), reqwest::Error> {
        let response = self.http.post(format!("{}{path_and_query}", self.base_url)).json(body).send().await?;
        envelope(response).await
    }

    pub async fn post_empty(&self, path_and_query: &str) -> Result<(u16, Value), reqwest::Error> {
        let response = self.http.post(format!("{}{path_and_query}", self.base_url)).send().await?;
        envelope(response).await
    }

    pub async fn put_empty(&self, path_and_query: &str) -> Result<(u16, Value), reqwest::Error> {
        let response = self.http.put(format!("{}{path_and_query}", self.base_url)).send().await?;
        envelope(response).await
    }

    pub async fn get(&self, path_and_query: &str) -> Result<(u16, Value), reqwest::Error> {
        let response = self.http.get(format!("{}{path_and_query}", self.base_url)).send().await?;
        envelope(response).await
    }

    pub async fn get_text(&self, path: &str) -> Result<(u16, String), reqwest::Error> {
        let response = self.http.get(format!("{}{path}", self.base_url)).send().await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }
}

async fn envelope(response: reqwest::Response) -> Result<(u16, Value), reqwest::Error> {
    let status = response.status().as_u16();
    let body: Value = response.json().await?;
    Ok((status, body))
}

pub use delayq_testkit::{free_port, unique_name};

/// Runs the futures concurrently, each in its own task, and returns their outputs in order.
pub async fn join_spawned<F: std::future::Future + Send + 'static>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        outputs.push(handle.await.expect("task"));
    }
    outputs
}

/// Creates the directory of node `name` under `root` and returns it.
pub fn node_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("node dir");
    dir
}

/// The environment of node `node` of the distributed deployment: the Redis
/// scheduler of `redis_url` under key `prefix`, the store of `database_url`.
pub fn distributed_env<'a>(
    redis_url: &'a str,
    database_url: &'a str,
    prefix: &'a str,
    node: &'a str,
) -> Vec<(&'static str, &'a str)> {
    vec![
        ("DELAYQ_REDIS_URL", redis_url),
        ("DELAYQ_DATABASE_URL", database_url),
        ("DELAYQ_SCHEDULER__REDIS_PREFIX", prefix),
        ("DELAYQ_NODE_ID", node),
    ]
}

/// Long-polls `topic` through `client` (up to 100 jobs, waiting up to 1 s)
/// until aborted, and hands the ids of each answer to `handle`; a pop that
/// fails or is refused is tried again 50 ms later.
pub async fn consume<F, Fut>(client: &Client, topic: &str, mut handle: F)
where
    F: FnMut(Vec<String>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let path = format!("/pop?topic={topic}&count=100&timeout=1000");
    loop {
        let Ok((200, popped)) = client.get(&path).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ids = popped["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|job| job["id"].as_str().map(str::to_owned))
            .collect();
        handle(ids).await;
    }
}

/// Finishes the jobs `ids` at once, each retried as [`finish_with_retries`] does.
pub async fn finish_all(client: &Client, ids: Vec<String>, attempts: u32) {
    join_spawned(ids.into_iter().map(|id| finish_with_retries(client.clone(), id, attempts))).await;
}

/// Finishes a job, trying again every 200 ms, `attempts` times at most, while
/// a backend answers 503 or the request fails; fails the test on any other answer.
pub async fn finish_with_retries(client: Client, id: String, attempts: u32) {
    for _ in 0..attempts {
        match client.post_empty(&format!("/finish?jobId={id}")).await {
            Ok((200, _)) => return,
            Ok((503, _)) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            Ok((status, body)) => panic!("finish {id} answered {status}: {body}"),
        }
    }
    panic!("finish {id} kept failing");
}

/// Runs `delayq serve` in `dir` with `env` (on free loopback ports, data in
/// `dir/data`), expecting it to stop by itself at start; returns its output.
pub async fn serve_until_exit(dir: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut command = serve_command(dir, env);
    command.stdin(Stdio::null());
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("a refused server stops at once instead of serving")
        .expect("run delayq serve")
}

/// Creates a fresh database on the MariaDB of `root_url` and returns its URL
/// (through `host_port` instead of the server's own address when given).
pub async fn fresh_database(root_url: &str, name: &str, host_port: Option<&str>) -> String {
    use sqlx::Connection;
    let mut connection = sqlx::MySqlConnection::connect(root_url).await.expect("connect to mariadb");
    sqlx::query(&format!("CREATE DATABASE `{name}`")).execute(&mut connection).await.expect("create database");
    let base = root_url.rsplit_once('/').map(|(base, _)| base).expect("url has a database");
    match host_port {
        None => format!("{base}/{name}"),
        Some(host_port) => {
            let (scheme_user, _) = base.rsplit_once('@').expect("url names a user");
            format!("{scheme_user}@{host_port}/{name}")
        }
    }
}

/// A gRPC channel to a node's listener at `addr` (`host:port`).
pub async fn grpc_channel(addr: &str) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("valid url")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect to the grpc listener")
}
