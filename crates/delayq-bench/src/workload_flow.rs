//! Flow: producers and consumers at once. N jobs due at once are pushed one per
//! `/push`, C in flight, as in W1, while the consumers of W2 (each slot finishes
//! what it popped before it pops again) take them; measures whether the acks
//! keep up with the pushes: how many jobs were still unfinished when the last
//! push was answered (still queued, or popped and not yet acked), and how long
//! the rest took.

use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::body::DueTime;
use crate::clock::now_ms;
use crate::consumed::{ConsumedArgs, ConsumedRun, PushPlan};
use crate::error::BenchResult;
use crate::pushers::{JobSpec, PushMode};
use crate::report::Metrics;
use crate::RunContext;

/// Parameters of the flow workload.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct FlowArgs {
    /// Jobs to push, each due as soon as it is pushed.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) n: usize,
    /// Pushes in flight (one job per `/push`).
    #[arg(long, default_value_t = 50)]
    pub(crate) push_concurrency: usize,
    /// How long after the last push to wait for missing jobs, in ms.
    #[arg(long, default_value_t = 60_000)]
    pub(crate) grace_ms: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) body_bytes: usize,
    /// The consumers, and how everything reaches the server.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) consumed: ConsumedArgs,
}

/// Runs the flow workload once on `topic`.
///
/// # Errors
/// Returns invalid parameters or a failure to set the run up.
pub(crate) async fn run(args: &FlowArgs, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
    // Due on arrival: every job is due at the run's start, already past when it
    // is pushed, so each is ready at once and carries the due time the receipt
    // log checks.
    let t0_ms = now_ms();
    let jobs: Vec<JobSpec> =
        (0..args.n as u64).map(|index| JobSpec { index, due: DueTime::RunAtMs(t0_ms), body_due_ms: t0_ms }).collect();
    let plan = PushPlan::new(&jobs, args.body_bytes, PushMode::Single, 1, args.push_concurrency);
    let (run, pushed) = ConsumedRun::start_and_push(context, topic, &args.consumed, &plan).await?;
    let at_push_end = run.receipts().counters();
    run.wait_for_all(pushed.end_ms + args.grace_ms).await;
    // Every job received: wait for the acks of the last pops to be answered.
    let finish_deadline = now_ms() + args.grace_ms;
    while now_ms() < finish_deadline {
        let counters = run.receipts().counters();
        if counters.finished >= counters.received {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut metrics, receipts) = run.stop(context).await;
    pushed.record_rate(&mut metrics);
    pushed.record_outcome(&mut metrics);
    // Beside the consumers' `finish_latency_ms_mean`: whether an ack waits
    // longer than a push.
    let latencies = &pushed.stats.latencies_us;
    if !latencies.is_empty() {
        let mean_us = latencies.iter().sum::<u64>() as f64 / latencies.len() as f64;
        metrics.set("push_latency_ms_mean", mean_us / 1000.0);
    }
    // With groups every delivery counts: `expected` is n × groups.
    let expected = at_push_end.expected;
    metrics.set("unfinished_at_push_end", expected.saturating_sub(at_push_end.finished) as f64);
    // Of those, the ones still queued in delayq (the backlog), and the ones the
    // consumers held: popped, not yet acked (at most a pop's count per slot).
    metrics.set("unreceived_at_push_end", expected.saturating_sub(at_push_end.received) as f64);
    metrics.set("in_hand_at_push_end", at_push_end.received.saturating_sub(at_push_end.finished) as f64);
    let counters = receipts.counters();
    if counters.last_finish_ms > 0 {
        let last_finish_ms = counters.last_finish_ms.max(pushed.end_ms);
        // How long after the last push was answered the last ack was.
        metrics.set("finish_after_push_ms", (last_finish_ms - pushed.end_ms) as f64);
        let flow_elapsed_ms = last_finish_ms.saturating_sub(pushed.start_ms).max(1);
        metrics.set("finish_jobs_per_s", counters.finished as f64 * 1000.0 / flow_elapsed_ms as f64);
    }
    metrics.valid =
        pushed.stats.job_errors() == 0 && counters.received == counters.expected && counters.due_mismatches == 0;
    Ok(metrics)
}
