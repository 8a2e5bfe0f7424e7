//! Workload 1 (W1 of docs/benchmarks.md): push throughput of delayed jobs, single or batch.

use std::sync::Arc;

use clap::Args;
use serde::Serialize;

use crate::body::{job_body, DueTime};
use crate::client::BenchClient;
use crate::clock::now_ms;
use crate::error::{BenchError, BenchResult};
use crate::prng::uniform_delays;
use crate::pushers::{build_units, push_all, JobSpec, PushMode, PushStats, TransportArgs};
use crate::report::Metrics;
use crate::RunContext;

/// Parameters of workload 1.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct PushArgs {
    /// Jobs to push.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) n: usize,
    /// Shortest delay in ms.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) delay_min_ms: u64,
    /// Longest delay in ms (inclusive).
    #[arg(long, default_value_t = 40_000)]
    pub(crate) delay_max_ms: u64,
    /// `single`: one job per `/push`; `batch`: `--batch` jobs per `/push/batch`.
    #[arg(long, value_enum, default_value_t = PushMode::Single)]
    pub(crate) mode: PushMode,
    /// Requests in flight in single mode.
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Jobs per `/push/batch` call in batch mode.
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch: usize,
    /// Batch calls in flight in batch mode.
    #[arg(long, default_value_t = 1)]
    pub(crate) batch_concurrency: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) body_bytes: usize,
    /// mulberry32 seed of the delays.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u32,
    /// HTTP or gRPC.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) transport: TransportArgs,
}

impl PushArgs {
    fn slots(&self) -> usize {
        match self.mode {
            PushMode::Single => self.concurrency,
            PushMode::Batch => self.batch_concurrency,
        }
    }
}

/// Runs workload 1 once on `topic`.
///
/// # Errors
/// Returns invalid parameters or a failure before the timed phase.
pub(crate) async fn run(args: &PushArgs, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
    if args.n == 0 || args.delay_min_ms > args.delay_max_ms {
        return Err(BenchError::Invalid("need n > 0 and delay-min-ms <= delay-max-ms".into()));
    }
    let delays = uniform_delays(args.seed, args.n, args.delay_min_ms, args.delay_max_ms);
    let jobs: Vec<JobSpec> = delays
        .iter()
        .enumerate()
        .map(|(index, delay_ms)| JobSpec { index: index as u64, due: DueTime::DelayMs(*delay_ms), body_due_ms: 0 })
        .collect();
    let units =
        Arc::new(build_units(topic, &jobs, args.body_bytes, args.mode, args.batch, false, args.transport.transport)?);
    let request_count = units.len();

    let client = BenchClient::new(&context.server, args.slots())?;
    let producer = args.transport.producer(&client, args.slots()).await?;
    client.warm_push(&format!("{topic}-warmup"), &job_body(0, 0, args.body_bytes)?).await?;

    let cpu_before = context.probes.cpu_snapshot().await;
    let start_ms = now_ms();
    let stats = push_all(&producer, units, args.slots()).await;
    let end_ms = now_ms();
    let cpu_after = context.probes.cpu_snapshot().await;

    let mut metrics = Metrics::default();
    metrics.set("n", args.n as f64);
    metrics.set("requests", request_count as f64);
    record_throughput(&mut metrics, args.n, start_ms, end_ms);
    record_push_stats(&mut metrics, &stats);
    for (name, value) in cpu_before.micros_per_job(&cpu_after, args.n) {
        metrics.set_some(name, value);
    }
    let counts = client.topic_counts(topic).await;
    let delayed = counts.as_ref().map_or(0, |counts| counts.delay);
    metrics.set("server_delay_count", delayed as f64);
    if let Ok(counts) = &counts {
        metrics.set("server_ready_count", counts.ready as f64);
    } else if let Err(error) = &counts {
        eprintln!("validity check failed: {error}");
    }
    metrics.valid = delayed == args.n as u64;
    Ok(metrics)
}

/// Records the elapsed time and jobs/s of a timed phase.
pub(crate) fn record_throughput(metrics: &mut Metrics, jobs: usize, start_ms: u64, end_ms: u64) {
    let elapsed_ms = end_ms.saturating_sub(start_ms).max(1);
    metrics.set("elapsed_ms", elapsed_ms as f64);
    metrics.set("jobs_per_s", jobs as f64 * 1000.0 / elapsed_ms as f64);
}

/// Records request latency percentiles (ms) and error counts of a push phase.
pub(crate) fn record_push_stats(metrics: &mut Metrics, stats: &PushStats) {
    let mut latencies_ms: Vec<f64> = stats.latencies_us.iter().map(|micros| *micros as f64 / 1000.0).collect();
    latencies_ms.sort_by(f64::total_cmp);
    metrics.set_some("push_latency_ms_p50", crate::report::nearest_rank(&latencies_ms, 50));
    metrics.set_some("push_latency_ms_p99", crate::report::nearest_rank(&latencies_ms, 99));
    metrics.set_some("push_latency_ms_max", latencies_ms.last().copied());
    metrics.set("errors", stats.job_errors() as f64);
    metrics.set("failed_requests", stats.failed_requests as f64);
}
