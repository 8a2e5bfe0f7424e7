//! Two beanstalkd client libraries from the package registries, used as their
//! documentation shows, run a producer and a worker through the commands
//! against the real binary, embedded and on Redis + MariaDB, including a
//! worker process killed while it holds a reservation: greenstalk (PyPI,
//! `tests/beanstalk/greenstalk_round_trip.py`, run by the Python of
//! `DELAYQ_TEST_BEANSTALK_PYTHON`) and jackd (npm,
//! `tests/beanstalk/jackd_round_trip.js`, run by the Node of
//! `DELAYQ_TEST_BEANSTALK_NODE`). `scripts/test.sh` installs both.

use std::path::PathBuf;
use std::time::Duration;

use delayq_testkit::{free_port, service, unique_name};

mod common;

use common::Server;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/beanstalk").join(name)
}

/// Runs `program script 127.0.0.1 PORT TUBE` and checks it printed `ok`.
async fn run_client(program: &str, script_name: &str, port: u16, tube: &str) {
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(program)
            .arg(script(script_name))
            .args(["127.0.0.1", &port.to_string(), tube])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{script_name} finished within 120 s"))
    .unwrap_or_else(|error| panic!("run {program}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && stdout.trim() == "ok", "{script_name}: {stdout}\n{stderr}");
}

/// Runs both clients against a node started with `env` plus the beanstalk listener.
async fn run_both_clients(env: &[(&str, &str)]) {
    let (Some(python), Some(node)) = (service("DELAYQ_TEST_BEANSTALK_PYTHON"), service("DELAYQ_TEST_BEANSTALK_NODE"))
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut env = env.to_vec();
    env.push(("DELAYQ_BEANSTALK_ADDR", &addr));
    let server = Server::start(dir.path(), &env).await;
    run_client(&python, "greenstalk_round_trip.py", port, "greenstalk").await;
    run_client(&node, "jackd_round_trip.js", port, "jackd").await;
    let log_path = dir.path().to_owned();
    assert!(server.terminate().await, "a clean shutdown; logs in {}", log_path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_libraries_round_trip_on_the_embedded_node() {
    run_both_clients(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_libraries_round_trip_on_redis_and_mariadb() {
    let (Some(redis_url), Some(mysql_url)) = (service("DELAYQ_TEST_REDIS_URL"), service("DELAYQ_TEST_MYSQL_URL"))
    else {
        return;
    };
    let name = unique_name("dq_e2e_beanstalk_clients");
    let database_url = common::fresh_database(&mysql_url, &name, None).await;
    run_both_clients(&common::distributed_env(&redis_url, &database_url, &name, "c1")).await;
}
