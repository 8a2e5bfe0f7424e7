//! A Python client generated from the `.proto` with grpcio-tools pushes,
//! subscribes and finishes against the server started here.
//!
//! The venv (grpcio, grpcio-tools from PyPI) is cached under the target
//! directory. Without `python3` (or its venv module) the test prints
//! "skipped: python3 venv not available" and passes, unless
//! `DELAYQ_TEST_REQUIRE_SERVICES=1`, where that is a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::TestServer;

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
const PACKAGES: [&str; 2] = ["grpcio", "grpcio-tools"];

fn run(command: &mut Command) -> Option<Output> {
    command.output().ok()
}

fn succeeded(output: &Option<Output>) -> bool {
    output.as_ref().is_some_and(|output| output.status.success())
}

fn describe(output: &Option<Output>) -> String {
    match output {
        None => "could not be started".to_owned(),
        Some(output) => format!(
            "{}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

fn venv_ready(venv: &Path) -> bool {
    succeeded(&run(Command::new(venv_python(venv)).args(["-c", "import grpc, grpc_tools"])))
}

/// Returns the cached venv, building it when missing; `None` when python3 has no venv.
fn python_venv() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("delayq-rpc-python-venv");
    if venv_ready(&venv) {
        return Some(venv);
    }
    // Build beside it and move it in place, so concurrent runs never see half a venv.
    let building = venv.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let created = run(Command::new("python3").arg("-m").arg("venv").arg(&building));
    if !succeeded(&created) {
        eprintln!("python3 -m venv failed: {}", describe(&created));
        return None;
    }
    let pip = run(Command::new(venv_python(&building))
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(PACKAGES));
    assert!(succeeded(&pip), "pip install {PACKAGES:?} failed: {}", describe(&pip));
    let _ = std::fs::remove_dir_all(&venv);
    if std::fs::rename(&building, &venv).is_err() {
        let _ = std::fs::remove_dir_all(&building);
    }
    assert!(venv_ready(&venv), "the venv at {} does not import grpc", venv.display());
    Some(venv)
}

/// Generates `delayq_pb2.py` and `delayq_pb2_grpc.py` into `out`.
fn generate_client(venv: &Path, out: &Path) {
    let proto_dir = Path::new(MANIFEST_DIR).join("proto");
    let generated = run(Command::new(venv_python(venv))
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{}", proto_dir.display()))
        .arg(format!("--python_out={}", out.display()))
        .arg(format!("--grpc_python_out={}", out.display()))
        .arg(proto_dir.join("delayq.proto")));
    assert!(succeeded(&generated), "grpc_tools.protoc failed: {}", describe(&generated));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_pushes_subscribes_and_finishes() {
    let venv = tokio::task::spawn_blocking(python_venv).await.expect("venv task");
    let Some(venv) = venv else {
        delayq_testkit::skip("python3 venv not available");
        return;
    };
    let generated = tempfile::tempdir().expect("temp dir");
    generate_client(&venv, generated.path());

    let server = TestServer::start().await;
    let script = Path::new(MANIFEST_DIR).join("tests/python/client_test.py");
    let mut command = Command::new(venv_python(&venv));
    command.arg(script).arg(server.addr.to_string()).arg(generated.path());
    let ran = tokio::time::timeout(Duration::from_secs(120), tokio::task::spawn_blocking(move || run(&mut command)))
        .await
        .expect("the python client finishes within 120 s")
        .expect("python task");
    assert!(succeeded(&ran), "the python client failed: {}", describe(&ran));
    print!("{}", ran.map(|output| String::from_utf8_lossy(&output.stdout).into_owned()).unwrap_or_default());
    server.stop().await;
}
