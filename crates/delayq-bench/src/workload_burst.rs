//! Workload 4: a burst of N jobs all due at the same instant, drained by long-polling
//! consumers; measures how long the server takes to hand all of them out.

use clap::Args;
use serde::Serialize;

use crate::body::DueTime;
use crate::clock::now_ms;
use crate::consumed::{ConsumedArgs, ConsumedRun, PushPlan};
use crate::error::BenchResult;
use crate::pushers::{JobSpec, PushMode};
use crate::report::Metrics;
use crate::RunContext;

/// Parameters of workload 4.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct BurstArgs {
    /// Jobs to push, all due at the same instant.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) n: usize,
    /// The due instant, in ms after T0; must leave time to push every job.
    #[arg(long, default_value_t = 15_000)]
    pub(crate) lead_ms: u64,
    /// How long after the due instant to wait for missing jobs, in ms: long enough
    /// for strict consumers to drain every job on a slow machine.
    #[arg(long, default_value_t = 300_000)]
    pub(crate) grace_ms: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) body_bytes: usize,
    /// Jobs per `/push/batch` call.
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch: usize,
    /// Batch calls in flight.
    #[arg(long, default_value_t = 1)]
    pub(crate) batch_concurrency: usize,
    /// The consumers, and how everything reaches the server.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) consumed: ConsumedArgs,
}

/// Runs workload 4 once on `topic`.
///
/// # Errors
/// Returns invalid parameters or a failure to set the run up.
pub(crate) async fn run(args: &BurstArgs, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
    let t0_ms = now_ms();
    let due_at_ms = t0_ms + args.lead_ms;
    let jobs: Vec<JobSpec> = (0..args.n as u64)
        .map(|index| JobSpec { index, due: DueTime::RunAtMs(due_at_ms), body_due_ms: due_at_ms })
        .collect();
    let plan =
        PushPlan::new(&jobs, args.body_bytes, PushMode::Batch, args.batch, args.batch_concurrency).counting_late();
    let (run, pushed) = ConsumedRun::start_and_push(context, topic, &args.consumed, &plan).await?;
    if pushed.end_ms >= due_at_ms {
        eprintln!("burst: the push ended {} ms after the due instant; raise --lead-ms", pushed.end_ms - due_at_ms);
    }
    run.wait_for_all(due_at_ms + args.grace_ms).await;
    let (mut metrics, receipts) = run.stop(context).await;
    pushed.record_end(&mut metrics, t0_ms);
    pushed.record_rate(&mut metrics);
    pushed.record_outcome(&mut metrics);
    let mut latenesses = receipts.latenesses_ms();
    latenesses.sort_by(f64::total_cmp);
    let drain_ms = latenesses.last().copied();
    metrics.set_some("first_pop_ms", latenesses.first().copied());
    metrics.set_some("drain_ms", drain_ms);
    if let Some(drain_ms) = drain_ms {
        metrics.set("drain_jobs_per_s", latenesses.len() as f64 * 1000.0 / drain_ms.max(1.0));
    }
    metrics.set_distribution("lateness_ms", &mut latenesses);
    let counters = receipts.counters();
    if counters.last_finish_ms > 0 {
        // How long after the due instant the last ack was answered.
        metrics.set("finish_drain_ms", counters.last_finish_ms as f64 - due_at_ms as f64);
    }
    // With groups every group must drain every job: the deliveries expected.
    metrics.valid =
        pushed.end_ms < due_at_ms && pushed.stats.pushed_late == 0 && counters.received == counters.expected;
    Ok(metrics)
}
