//! Workload 2 (W2 of docs/benchmarks.md): firing lateness of evenly spaced due times, pushed
//! in shuffled order and received by long-polling consumers. With `--groups N` every
//! group receives every job, and lateness is taken over all N × n deliveries.

use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::body::DueTime;
use crate::clock::now_ms;
use crate::consumed::{ConsumedArgs, ConsumedRun, PushPlan};
use crate::error::BenchResult;
use crate::prng::shuffled_order;
use crate::pushers::{JobSpec, PushMode};
use crate::report::Metrics;
use crate::sampler::MemorySampler;
use crate::RunContext;

/// Parameters of workload 2.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct LatenessArgs {
    /// Jobs to push.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) n: usize,
    /// Start of the due window after T0, in ms.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) start_ms: u64,
    /// Length of the due window in ms.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) window_ms: u64,
    /// How long after the window end to wait for missing jobs, in ms.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) grace_ms: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) body_bytes: usize,
    /// mulberry32 seed of the push order.
    #[arg(long, default_value_t = 2)]
    pub(crate) seed: u32,
    /// `batch`: `/push/batch` calls; `single`: one `/push` per job.
    #[arg(long, value_enum, default_value_t = PushMode::Batch)]
    pub(crate) push_mode: PushMode,
    /// Jobs per batch call.
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch: usize,
    /// Push requests in flight (batch mode uses 1 unless raised).
    #[arg(long)]
    pub(crate) push_concurrency: Option<usize>,
    /// Read Redis `used_memory` and the server's RSS every this many ms during the run
    /// and report their distribution (0: not sampled). W6 uses it: the horizon must keep
    /// Redis near one horizon's worth of jobs.
    #[arg(long, default_value_t = 0)]
    pub(crate) sample_memory_ms: u64,
    /// The consumers, and how everything reaches the server.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) consumed: ConsumedArgs,
}

/// Runs workload 2 once on `topic`.
///
/// # Errors
/// Returns invalid parameters or a failure to set the run up.
pub(crate) async fn run(args: &LatenessArgs, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
    // T0 comes before anything else (step 1).
    let t0_ms = now_ms();
    let n = args.n as u64;
    let due_of = |index: u64| t0_ms + args.start_ms + index * args.window_ms / n;
    let jobs: Vec<JobSpec> = shuffled_order(args.seed, args.n)
        .into_iter()
        .map(|position| {
            let index = position as u64;
            JobSpec { index, due: DueTime::RunAtMs(due_of(index)), body_due_ms: due_of(index) }
        })
        .collect();
    let push_slots = args.push_concurrency.unwrap_or(match args.push_mode {
        PushMode::Single => 50,
        PushMode::Batch => 1,
    });

    let plan = PushPlan::new(&jobs, args.body_bytes, args.push_mode, args.batch, push_slots).counting_late();
    let sampler = (args.sample_memory_ms > 0)
        .then(|| MemorySampler::start(&context.probes, Duration::from_millis(args.sample_memory_ms)));
    let (run, pushed) = ConsumedRun::start_and_push(context, topic, &args.consumed, &plan).await?;
    run.wait_for_all(t0_ms + args.start_ms + args.window_ms + args.grace_ms).await;
    let (mut metrics, receipts) = run.stop(context).await;
    if let Some(sampler) = sampler {
        sampler.finish(&mut metrics);
    }
    let counters = receipts.counters();
    let by_due = receipts.latenesses_by_due();
    record_latest(&mut metrics, &by_due, t0_ms);
    let mut latenesses: Vec<f64> = by_due.into_iter().map(|(_, lateness)| lateness).collect();
    metrics.set("early", latenesses.iter().filter(|lateness| **lateness < 0.0).count() as f64);
    metrics.set_distribution("lateness_ms", &mut latenesses);
    receipts.record_group_p99_max(&mut metrics);
    if counters.last_finish_ms > 0 {
        metrics.set("finish_end_ms", counters.last_finish_ms.saturating_sub(t0_ms) as f64);
    }
    let (slowest_us, slowest_sent_ms) = counters.slowest_finish;
    if slowest_us > 0 {
        // A strict consumer pops nothing while it finishes: a slow finish is lateness.
        metrics.set("finish_latency_ms_max", slowest_us as f64 / 1000.0);
        metrics.set("finish_slowest_sent_ms", slowest_sent_ms.saturating_sub(t0_ms) as f64);
    }
    pushed.record_end(&mut metrics, t0_ms);
    pushed.record_outcome(&mut metrics);
    metrics.valid = pushed.end_after_ms(t0_ms) < args.start_ms && pushed.stats.pushed_late == 0;
    Ok(metrics)
}

/// How many of the latest jobs [`record_latest`] names.
const LATEST_NAMED: usize = 5;

/// Records when the latest jobs were due (ms after T0) and how late each was,
/// as `latest<k>_due_ms` and `latest<k>_ms`: lateness that comes at the same
/// moments of every run points at what runs then.
fn record_latest(metrics: &mut Metrics, by_due: &[(u64, f64)], t0_ms: u64) {
    let mut latest = by_due.to_vec();
    latest.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (rank, (due_ms, lateness)) in latest.into_iter().take(LATEST_NAMED).enumerate() {
        metrics.set(&format!("latest{}_due_ms", rank + 1), due_ms.saturating_sub(t0_ms) as f64);
        metrics.set(&format!("latest{}_ms", rank + 1), lateness);
    }
}
