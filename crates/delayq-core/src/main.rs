//! The `delayq` binary: the server (`serve`) and a small HTTP client
//! (`push`, `pop`, `finish`, `stats`).
//!
//! Must not contain logic that belongs in a library crate: it parses the
//! command line, wires the crates together and shuts them down in order.
//!
//! Layout:
//! - `cli`: the command line.
//! - `serve`: wiring and graceful shutdown of the server.
//! - `guard`: the start-up refusal to listen beyond loopback without auth.
//! - `backends`: the one place that picks the scheduler and store backends.
//! - `leader`: starts and stops leader work (the timer, the forwarder) as the role changes.
//! - `forward`: the forwarding routes built from `[forward]`.
//! - `node`: this node's name and snowflake worker id.
//! - `client`: the client subcommands.

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

mod backends;
mod beanstalk;
mod cli;
mod client;
mod forward;
mod guard;
mod leader;
mod node;
mod render;
mod serve;

use std::future::Future;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use delayq_config::Config;

use crate::cli::{Cli, Command};

/// The server allocates and frees many small buffers on several threads at
/// once (requests, statements, script arguments); mimalloc's per-thread heaps
/// keep that off the shared arenas of the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let outcome = match Cli::parse().command {
        // The server's configuration is read before its runtime starts: it sizes the runtime.
        Command::Serve(args) => match Config::load(args.config.as_deref()) {
            Ok(config) => run(Some(config.server.worker_threads()), serve::run(config)),
            Err(error) => Err(error.into()),
        },
        Command::Client(command) => run(None, client::run(command)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("delayq: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `task` to its end on a multi-threaded runtime of `workers` threads
/// (`None`: one per core).
fn run(workers: Option<usize>, task: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    let runtime = builder.enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(task)
}
