//! Workload 4: a burst of N jobs all due at the same instant, drained by long-polling
//! consumers; measures how long the server takes to hand all of them out.

use std::sync::Arc;

use clap::Args;
use serde::Serialize;

use crate::body::DueTime;
use crate::clock::now_ms;
use crate::consumed::ConsumedRun;
use crate::error::{BenchError, BenchResult};
use crate::pushers::{build_units, JobSpec, PushMode, TransportArgs};
use crate::report::Metrics;
use crate::workload_lateness::ConsumerArgs;
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
    /// Consumer settings.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) consumers: ConsumerArgs,
    /// HTTP or gRPC, for the pushes and the consumers.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) transport: TransportArgs,
}

/// Runs workload 4 once on `topic`.
///
/// # Errors
/// Returns invalid parameters or a failure to set the run up.
pub(crate) async fn run(args: &BurstArgs, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
    let t0_ms = now_ms();
    if args.n == 0 {
        return Err(BenchError::Invalid("need n > 0".into()));
    }
    let due_at_ms = t0_ms + args.lead_ms;
    let jobs: Vec<JobSpec> = (0..args.n as u64)
        .map(|index| JobSpec { index, due: DueTime::RunAtMs(due_at_ms), body_due_ms: due_at_ms })
        .collect();
    let units = Arc::new(build_units(
        topic,
        &jobs,
        args.body_bytes,
        PushMode::Batch,
        args.batch,
        true,
        args.transport.transport,
    )?);

    let run = ConsumedRun::start(
        context,
        topic,
        &args.transport,
        &args.consumers,
        args.batch_concurrency,
        vec![due_at_ms; args.n],
    )
    .await?;
    let push_start_ms = now_ms();
    let push_stats = run.push(units).await;
    let push_end_ms = now_ms();
    if push_end_ms >= due_at_ms {
        eprintln!("burst: the push ended {} ms after the due instant; raise --lead-ms", push_end_ms - due_at_ms);
    }
    run.wait_for_all(due_at_ms + args.grace_ms).await;
    let (mut metrics, log) = run.stop(context, args.n).await;
    let push_elapsed_ms = push_end_ms.saturating_sub(push_start_ms).max(1);
    metrics.set("push_end_ms", push_end_ms.saturating_sub(t0_ms) as f64);
    metrics.set("push_jobs_per_s", args.n as f64 * 1000.0 / push_elapsed_ms as f64);
    metrics.set("pushed_late", push_stats.pushed_late as f64);
    metrics.set("push_errors", push_stats.job_errors() as f64);
    let mut latenesses = log.latenesses_ms();
    latenesses.sort_by(f64::total_cmp);
    let drain_ms = latenesses.last().copied();
    metrics.set_some("first_pop_ms", latenesses.first().copied());
    metrics.set_some("drain_ms", drain_ms);
    if let Some(drain_ms) = drain_ms {
        metrics.set("drain_jobs_per_s", latenesses.len() as f64 * 1000.0 / drain_ms.max(1.0));
    }
    metrics.set_distribution("lateness_ms", &mut latenesses);
    let counters = log.counters();
    if counters.last_finish_ms > 0 {
        // How long after the due instant the last ack was answered.
        metrics.set("finish_drain_ms", counters.last_finish_ms as f64 - due_at_ms as f64);
    }
    metrics.valid = push_end_ms < due_at_ms && push_stats.pushed_late == 0 && counters.received == args.n as u64;
    Ok(metrics)
}
