//! `delayq-bench`: a load generator that runs the workloads of `docs/benchmarks.md`
//! against a running delayq server over HTTP (W1, W2 and W4 also over gRPC), so
//! delayq's numbers sit in one table with the peers'.
//!
//! Must not: start or stop the server, or change any job but the ones it pushes (except
//! with `--clear`, which calls `/clearAll`).
//!
//! Layout:
//! - `main`: the CLI, the repeat loop and the run context.
//! - `prng`: mulberry32, uniform delays and the Fisher–Yates order.
//! - `body`, `pushers`: job bodies and the pre-serialized producer slots.
//! - `consumers`: long-polling receive slots, receipts and the finishers.
//! - `consumed`: the frame of W2, W4 and flow: their consumer flags, the jobs pushed
//!   while the consumers run, and the numbers every such run reports.
//! - `groups`: the consumer groups a run declares (`--groups`), and the receipts of
//!   every group as one.
//! - `workload_push`, `workload_lateness`, `workload_memory`, `workload_burst`, `workload_flow`: one per workload;
//!   `workload_ceiling`: the Redis-only baseline the push numbers are divided by;
//!   `workload_floor`: the cost of a `/push` round trip before any queue work.
//! - `client`: the HTTP client; `grpc`: the gRPC client; `procstat`: `/proc` and Redis `INFO` readings.
//! - `report`: percentiles, tables, the median (min–max) summary and the JSON file.
//! - `session`: `summarize`, the table of a whole session directory with its ratios.
//! - `put_floor`: `put-floor`, a stand-in beanstalkd that only makes each put durable:
//!   the floor a durable server's `put` is measured against.

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

mod body;
mod client;
mod clock;
mod consumed;
mod consumers;
mod error;
mod groups;
mod grpc;
mod prng;
mod procstat;
mod pushers;
mod put_floor;
mod report;
mod sampler;
mod session;
mod workload_burst;
mod workload_ceiling;
mod workload_floor;
mod workload_flow;
mod workload_lateness;
mod workload_memory;
mod workload_push;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::client::BenchClient;
use crate::clock::now_ms;
use crate::error::{BenchError, BenchResult};
use crate::procstat::{Probes, ProcessProbe, RedisProbe};
use crate::report::{Metrics, RepRecord};

/// Runs a workload of docs/benchmarks.md against a running delayq server.
#[derive(Parser, Debug)]
#[command(name = "delayq-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(flatten)]
    Workload(Box<Workload>),
    /// Summarizes a directory `scripts/session.sh` wrote: every series as median
    /// (min–max), and the push rates divided by the same repetition's ceiling and peer.
    Summarize(session::SummarizeArgs),
    /// Serves the beanstalkd protocol's `put` and nothing more, answering `INSERTED`
    /// once the job is durable in the given store: the floor of a durable `put`,
    /// for the beanstalk peer drivers.
    PutFloor(put_floor::PutFloorArgs),
}

#[derive(Subcommand, Debug)]
enum Workload {
    /// W1: push throughput of delayed jobs (single or batch).
    Push(WorkloadArgs<workload_push::PushArgs>),
    /// W2: firing lateness of evenly spaced due times.
    Lateness(WorkloadArgs<workload_lateness::LatenessArgs>),
    /// W3: memory and journal bytes per pending delayed job.
    Memory(WorkloadArgs<workload_memory::MemoryArgs>),
    /// W4: N jobs due at one instant, drained by consumers.
    Burst(WorkloadArgs<workload_burst::BurstArgs>),
    /// Producers and consumers at once: N jobs due on arrival, pushed one per
    /// `/push` while strict consumers take them; do the acks keep up?
    Flow(WorkloadArgs<workload_flow::FlowArgs>),
    /// The baseline: Redis alone, one Lua HSET+ZADD per job (no delayq involved).
    Ceiling(WorkloadArgs<workload_ceiling::CeilingArgs>),
    /// The HTTP floor: `/push` requests the server refuses (delay -1) before any
    /// queue work, C in flight: what the transport alone costs here.
    Floor(WorkloadArgs<workload_floor::FloorArgs>),
}

/// A workload's own flags plus the flags every workload shares.
#[derive(Args, Debug, Serialize)]
struct WorkloadArgs<T: Args> {
    #[command(flatten)]
    #[serde(flatten)]
    workload: T,
    #[command(flatten)]
    #[serde(flatten)]
    common: CommonArgs,
}

/// Flags every workload shares.
#[derive(Args, Clone, Debug, Serialize)]
struct CommonArgs {
    /// Base URL of the delayq server.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    server: String,
    /// Pid of the server process, for CPU µs/job, RSS and written bytes from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Redis behind the server (`redis://host:port`), for `used_memory` and `INFO cpu`.
    #[arg(long)]
    redis_url: Option<String>,
    /// Write all parameters and numbers to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Repetitions; the published numbers use 3 and report median (min–max).
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// Prefix of the unique topic each repetition uses.
    #[arg(long, default_value = "bench")]
    topic_prefix: String,
    /// Call `/clearAll` before each repetition (deletes every live job on the server).
    #[arg(long)]
    clear: bool,
    /// Tokio worker threads of the load generator (1 = a single-threaded runtime).
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
}

/// What every workload run needs besides its own flags.
pub(crate) struct RunContext {
    /// Base URL of the server.
    pub(crate) server: String,
    /// Where resource numbers come from.
    pub(crate) probes: Probes,
}

impl Workload {
    fn name(&self) -> &'static str {
        match self {
            Workload::Push(_) => "push",
            Workload::Lateness(_) => "lateness",
            Workload::Memory(_) => "memory",
            Workload::Burst(_) => "burst",
            Workload::Flow(_) => "flow",
            Workload::Ceiling(_) => "ceiling",
            Workload::Floor(_) => "floor",
        }
    }

    fn common(&self) -> &CommonArgs {
        match self {
            Workload::Push(args) => &args.common,
            Workload::Lateness(args) => &args.common,
            Workload::Memory(args) => &args.common,
            Workload::Burst(args) => &args.common,
            Workload::Flow(args) => &args.common,
            Workload::Ceiling(args) => &args.common,
            Workload::Floor(args) => &args.common,
        }
    }

    fn params(&self) -> serde_json::Value {
        let params = match self {
            Workload::Push(args) => serde_json::to_value(args),
            Workload::Lateness(args) => serde_json::to_value(args),
            Workload::Memory(args) => serde_json::to_value(args),
            Workload::Burst(args) => serde_json::to_value(args),
            Workload::Flow(args) => serde_json::to_value(args),
            Workload::Ceiling(args) => serde_json::to_value(args),
            Workload::Floor(args) => serde_json::to_value(args),
        };
        params.unwrap_or(serde_json::Value::Null)
    }

    async fn run_once(&self, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
        match self {
            Workload::Push(args) => workload_push::run(&args.workload, context, topic).await,
            Workload::Lateness(args) => workload_lateness::run(&args.workload, context, topic).await,
            Workload::Memory(args) => workload_memory::run(&args.workload, context, topic).await,
            Workload::Burst(args) => workload_burst::run(&args.workload, context, topic).await,
            Workload::Flow(args) => workload_flow::run(&args.workload, context, topic).await,
            Workload::Ceiling(args) => workload_ceiling::run(&args.workload, topic).await,
            Workload::Floor(args) => workload_floor::run(&args.workload, context, topic).await,
        }
    }
}

fn main() -> ExitCode {
    let workload = match Cli::parse().command {
        Command::Workload(workload) => workload,
        Command::Summarize(args) => return exit_code(session::run(&args)),
        Command::PutFloor(args) => return exit_code(put_floor::run(&args)),
    };
    let threads = workload.common().client_threads;
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()
    };
    exit_code(match runtime {
        Ok(runtime) => runtime.block_on(run_repeats(&workload)),
        Err(error) => Err(BenchError::io("start the tokio runtime", error)),
    })
}

/// Success, or the error printed with its causes and a failure code.
fn exit_code(outcome: BenchResult<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("delayq-bench: {}", error_chain(&error));
            ExitCode::FAILURE
        }
    }
}

/// Runs every repetition, prints the tables and writes the JSON file.
async fn run_repeats(workload: &Workload) -> BenchResult<()> {
    let common = workload.common();
    if common.repeats == 0 {
        return Err(BenchError::Invalid("repeats must be at least 1".into()));
    }
    let context = RunContext {
        server: common.server.clone(),
        probes: Probes {
            server: common.server_pid.map(ProcessProbe::of_pid),
            redis: common.redis_url.as_deref().map(RedisProbe::from_url).transpose()?,
        },
    };
    let mut records = Vec::with_capacity(common.repeats);
    for rep in 1..=common.repeats {
        if common.clear {
            let cleared = BenchClient::new(&common.server, 1)?.clear_all().await?;
            println!("cleared {} live jobs", cleared.map_or("?".to_owned(), |count| count.to_string()));
        }
        let topic = format!("{}-{}-{}-{rep}", common.topic_prefix, workload.name(), now_ms());
        let metrics = workload.run_once(&context, &topic).await?;
        let record = RepRecord { rep, topic, metrics };
        report::print_rep(workload.name(), common.repeats, &record);
        records.push(record);
    }
    let summaries = report::summarize(&records);
    if common.repeats > 1 {
        report::print_summary(workload.name(), &records, &summaries);
    }
    if let Some(path) = &common.json {
        let result = report::to_json(workload.name(), workload.params(), &records, &summaries);
        report::write_json(path, &result)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Returns the error and its sources as `outer: inner: …`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
