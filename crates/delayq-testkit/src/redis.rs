//! A `redis-server` of the test's own, for tests that empty, stop or restart
//! Redis: the shared server of `DELAYQ_TEST_REDIS_URL` must never be.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::skip;

/// How long a starting `redis-server` may take to accept connections.
const START_LIMIT: Duration = Duration::from_secs(10);

/// A private `redis-server` on 127.0.0.1, without persistence, killed when
/// dropped.
///
/// It keeps nothing on disk (`--save ""`, no append-only file), so a restart
/// on the same port starts empty, as a Redis that lost its data does.
pub struct RedisProcess {
    child: Child,
    port: u16,
    /// Its working directory: whatever it writes stays out of the checkout.
    _dir: TempDir,
}

impl RedisProcess {
    /// Starts one on a free port, or returns `None` after [`skip`] when
    /// `redis-server` cannot be run (a failure under
    /// `DELAYQ_TEST_REQUIRE_SERVICES=1`).
    ///
    /// # Panics
    /// When it starts but does not accept connections within 10 s.
    pub async fn start() -> Option<RedisProcess> {
        RedisProcess::start_on(crate::free_port()).await
    }

    /// Starts one on `port`: a restart, after the one on that port was dropped.
    ///
    /// # Panics
    /// As [`RedisProcess::start`], when the port is taken, and when no
    /// temporary directory can be made.
    #[allow(clippy::panic, reason = "a test without a temporary directory cannot run; this fails it")]
    pub async fn start_on(port: u16) -> Option<RedisProcess> {
        let dir =
            tempfile::tempdir().unwrap_or_else(|error| panic!("no temporary directory for redis-server: {error}"));
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(error) => {
                skip(&format!("cannot start redis-server: {error}"));
                return None;
            }
        };
        let mut process = RedisProcess { child, port, _dir: dir };
        process.wait_until_accepting().await;
        Some(process)
    }

    /// Waits until the server accepts connections; fails the test when it
    /// exited (its port was taken) or is still not there after [`START_LIMIT`].
    async fn wait_until_accepting(&mut self) {
        let started = tokio::time::Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
            let exited = self.child.try_wait().ok().flatten();
            assert!(exited.is_none(), "redis-server on port {} exited at start: {exited:?}", self.port);
            assert!(started.elapsed() < START_LIMIT, "redis-server on port {} did not start", self.port);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Returns its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Returns its URL, `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against it with `args` (`["flushall"]`, `["info",
    /// "memory"]`) and returns what it printed.
    ///
    /// # Panics
    /// When `redis-cli` cannot run or fails.
    #[allow(clippy::panic, reason = "a test whose redis-cli command fails cannot go on; this fails it")]
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli").arg("-p").arg(self.port.to_string()).args(args).output();
        match output {
            Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout).into_owned(),
            Ok(output) => panic!("redis-cli {args:?}: {}", String::from_utf8_lossy(&output.stderr)),
            Err(error) => panic!("redis-cli {args:?}: {error}"),
        }
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        // Waited for, so the port is free for a restart once the drop returns.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_private_server_answers_and_is_gone_once_dropped() {
        let Some(server) = RedisProcess::start().await else { return };
        assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
        assert_eq!(server.cli(&["set", "key", "value"]).trim(), "OK");
        assert_eq!(server.cli(&["get", "key"]).trim(), "value");
        let port = server.port();
        drop(server);
        assert!(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err(), "killed on drop");

        let restarted = RedisProcess::start_on(port).await.unwrap();
        assert_eq!(restarted.cli(&["get", "key"]).trim(), "", "a restart starts empty");
    }
}
