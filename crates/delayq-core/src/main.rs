//! The `delayq` binary: the server (`serve`) and a small HTTP client
//! (`push`, `pop`, `finish`, `stats`).
//!
//! Must not contain logic that belongs in a library crate: it parses the
//! command line, wires the crates together and shuts them down in order.
//!
//! Layout:
//! - `cli`: the command line.
//! - `serve`: wiring and graceful shutdown of the server.
//! - `backends`: the one place that picks the scheduler and store backends.
//! - `leader`: starts and stops leader work (the timer, the forwarder) as the role changes.
//! - `forward`: the forwarding routes built from `[forward]`.
//! - `node`: this node's name and snowflake worker id.
//! - `client`: the client subcommands.

mod backends;
mod cli;
mod client;
mod forward;
mod leader;
mod node;
mod serve;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// The server allocates and frees many small buffers on several threads at
/// once (requests, statements, script arguments); mimalloc's per-thread heaps
/// keep that off the shared arenas of the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("delayq: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Client(command) => client::run(command).await,
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("delayq: {error:#}");
            ExitCode::FAILURE
        }
    }
}
