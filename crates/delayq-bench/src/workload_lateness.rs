//! Workload 2 (W2 of docs/benchmarks.md): firing lateness of evenly spaced due times, pushed
//! in shuffled order and received by long-polling consumers.

use std::sync::Arc;

use clap::Args;
use delayq_rpc::pb::v1::PopRequest;
use serde::Serialize;

use crate::body::DueTime;
use crate::client::BenchClient;
use crate::clock::now_ms;
use crate::consumed::ConsumedRun;
use crate::consumers::{Consumer, ConsumerSettings};
use crate::error::{BenchError, BenchResult};
use crate::prng::shuffled_order;
use crate::pushers::{build_units, JobSpec, PushMode, TransportArgs};
use crate::report::Metrics;
use crate::RunContext;

/// Consumer flags shared by the lateness and burst workloads.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct ConsumerArgs {
    /// Concurrent long-poll receive slots.
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Jobs asked for per pop (1–100).
    #[arg(long, default_value_t = 100)]
    pub(crate) pop_count: usize,
    /// Long-poll timeout of each pop in ms (0–30000).
    #[arg(long, default_value_t = 1000)]
    pub(crate) pop_timeout_ms: u64,
    /// Acknowledge on a separate pool of this many `/finish` slots, so a pop
    /// never waits for an ack. Unset (the default, W2 of docs/benchmarks.md): each
    /// receive slot finishes the jobs it got, one after another, before it pops again.
    #[arg(long)]
    pub(crate) finish_concurrency: Option<usize>,
    /// Pause after every consumer issued its first pop, before pushing.
    #[arg(long, default_value_t = 500)]
    pub(crate) settle_ms: u64,
    /// Time to keep receiving after the last job, to catch duplicates.
    #[arg(long, default_value_t = 1000)]
    pub(crate) duplicate_wait_ms: u64,
}

impl ConsumerArgs {
    /// Returns the consumer settings for `topic` on `server`, reached over `transport`.
    ///
    /// # Errors
    /// As [`TransportArgs::grpc_client`], or an unusable server URL.
    pub(crate) async fn settings(
        &self,
        transport: &TransportArgs,
        server: &str,
        topic: &str,
    ) -> BenchResult<ConsumerSettings> {
        let consumer = match transport.grpc_client().await? {
            Some(client) => {
                let pop = PopRequest {
                    topic: topic.to_owned(),
                    count: Some(self.pop_count as i64),
                    timeout_ms: Some(self.pop_timeout_ms as i64),
                };
                Consumer::Grpc { client, pop }
            }
            None => {
                let client = BenchClient::new(server, self.concurrency + self.finish_concurrency.unwrap_or(0))?;
                let pop_url =
                    client.url(&format!("/pop?topic={topic}&count={}&timeout={}", self.pop_count, self.pop_timeout_ms));
                Consumer::Http { client, pop_url }
            }
        };
        Ok(ConsumerSettings {
            consumer,
            concurrency: self.concurrency,
            finish_concurrency: self.finish_concurrency,
            pop_timeout_ms: self.pop_timeout_ms,
            settle_ms: self.settle_ms,
        })
    }
}

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
    /// Consumer settings.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) consumers: ConsumerArgs,
    /// HTTP or gRPC, for the pushes and the consumers.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) transport: TransportArgs,
}

/// Runs workload 2 once on `topic`.
///
/// # Errors
/// Returns invalid parameters or a failure to set the run up.
pub(crate) async fn run(args: &LatenessArgs, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
    // T0 comes before anything else (step 1).
    let t0_ms = now_ms();
    if args.n == 0 {
        return Err(BenchError::Invalid("need n > 0".into()));
    }
    let n = args.n as u64;
    let due_of = |index: u64| t0_ms + args.start_ms + index * args.window_ms / n;
    let due_ms: Vec<u64> = (0..n).map(due_of).collect();
    let jobs: Vec<JobSpec> = shuffled_order(args.seed, args.n)
        .into_iter()
        .map(|position| {
            let index = position as u64;
            JobSpec { index, due: DueTime::RunAtMs(due_of(index)), body_due_ms: due_of(index) }
        })
        .collect();
    let units = Arc::new(build_units(
        topic,
        &jobs,
        args.body_bytes,
        args.push_mode,
        args.batch,
        true,
        args.transport.transport,
    )?);
    let push_slots = args.push_concurrency.unwrap_or(match args.push_mode {
        PushMode::Single => 50,
        PushMode::Batch => 1,
    });

    let run = ConsumedRun::start(context, topic, &args.transport, &args.consumers, push_slots, due_ms).await?;
    let push_stats = run.push(units).await;
    let push_end_ms = now_ms().saturating_sub(t0_ms);
    run.wait_for_all(t0_ms + args.start_ms + args.window_ms + args.grace_ms).await;
    let (mut metrics, log) = run.stop(context, args.n).await;
    let counters = log.counters();
    let mut latenesses = log.latenesses_ms();
    metrics.set("early", latenesses.iter().filter(|lateness| **lateness < 0.0).count() as f64);
    metrics.set_distribution("lateness_ms", &mut latenesses);
    if counters.last_finish_ms > 0 {
        metrics.set("finish_end_ms", counters.last_finish_ms.saturating_sub(t0_ms) as f64);
    }
    metrics.set("push_end_ms", push_end_ms as f64);
    metrics.set("pushed_late", push_stats.pushed_late as f64);
    metrics.set("push_errors", push_stats.job_errors() as f64);
    metrics.valid = push_end_ms < args.start_ms && push_stats.pushed_late == 0;
    Ok(metrics)
}
