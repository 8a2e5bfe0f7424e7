//! The README's commands, run as written against a fresh embedded server: every
//! `sh` block of the README runs in `bash -euo pipefail`, with `localhost:8080`
//! pointed at the server and `delayq` on the `PATH`, and every answer it prints
//! must be a success. The blocks that start a server themselves (`… serve`, the
//! test command) are what this test stands on, and are only checked to be those.

mod common;

use std::path::Path;

use common::Server;
use serde_json::Value;

/// The fenced `sh` blocks of a Markdown text, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        let fence = line.trim_start();
        match current.as_mut() {
            None if fence == "```sh" => current = Some(Vec::new()),
            None => {}
            Some(lines) if fence == "```" => {
                blocks.push(lines.iter().map(|line| format!("{line}\n")).collect());
                current = None;
            }
            Some(lines) => lines.push(line),
        }
    }
    blocks
}

/// Whether a block starts a server (or the test suite) rather than talking to one.
fn starts_a_server(block: &str) -> bool {
    block.contains("-- serve") || block.contains("scripts/test.sh")
}

#[test]
fn sh_blocks_are_found_and_only_the_server_starting_ones_are_set_aside() {
    let markdown = "text\n```sh\necho one\n```\n```toml\nx = 1\n```\n  ```sh\n  cargo run -- serve\n  ```\n";
    let blocks = sh_blocks(markdown);
    assert_eq!(blocks, ["echo one\n", "  cargo run -- serve\n"]);
    assert!(!starts_a_server(&blocks[0]));
    assert!(starts_a_server(&blocks[1]));
}

#[tokio::test]
async fn every_command_of_the_readme_runs_and_succeeds() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("read README.md");
    let blocks = sh_blocks(&readme);
    let (set_aside, runnable): (Vec<&String>, Vec<&String>) = blocks.iter().partition(|block| starts_a_server(block));
    assert_eq!(set_aside.len(), 2, "the set-up commands and the distributed deployment's: {set_aside:?}");
    assert!(runnable.len() >= 2, "the tour and the client: {runnable:?}");

    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &[]).await;
    let address = server.base_url.trim_start_matches("http://").to_owned();
    let binary = Path::new(env!("CARGO_BIN_EXE_delayq"));
    let bin_dir = binary.parent().expect("the binary's directory");
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());

    let mut answers = 0;
    let mut tables = 0;
    for block in runnable {
        let script = block.replace("localhost:8080", &address);
        let output = tokio::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .env("PATH", &path)
            .env("DELAYQ_SERVER", &server.base_url)
            .current_dir(dir.path())
            .output()
            .await
            .expect("run bash");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "the block failed:\n{block}\nstdout: {stdout}\nstderr: {stderr}");
        if block.lines().any(|line| line.starts_with("delayq ") && !line.contains("--json")) {
            // The client's tables, for people: a refused command exits non-zero (checked
            // above); the tour's client block pushes, pops and finishes one job, then the stats.
            for shown in ["hello-1", "finished hello-1", "greetings", "TOPIC", "(all)"] {
                assert!(stdout.contains(shown), "{shown:?} not printed by:\n{block}\n{stdout}");
            }
            tables += 1;
            continue;
        }
        let commands = block.lines().filter(|line| line.starts_with("curl ") || line.starts_with("delayq ")).count();
        let printed: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|error| panic!("not JSON answers ({error}):\n{stdout}"));
        assert_eq!(printed.len(), commands, "one answer per command:\n{block}\n{stdout}");
        for answer in &printed {
            assert_eq!(answer["success"], Value::Bool(true), "a refused command in:\n{block}\n{answer}");
        }
        answers += printed.len();
        if let Some(tour_end) = printed.iter().rev().find(|answer| answer["data"]["id"] == "order-124") {
            assert_eq!(tour_end["data"]["state"], "finished", "the tour ends with its job finished: {tour_end}");
            assert_eq!(tour_end["data"]["attempt"], 2, "popped, nacked, popped again: {tour_end}");
        }
    }
    assert!(answers >= 9, "{answers} answers from the tour");
    assert_eq!(tables, 1, "the client's block");
}
