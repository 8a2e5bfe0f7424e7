//! Workload 3 (W3 of docs/benchmarks.md): memory (and journal bytes) per pending delayed job.
//! With `--spread-ms` and `--flush-redis` it is W5, far-future memory: due times spread
//! over days, and the time a Redis that lost its data takes to be whole again.
//! With `--groups N` the topic has N consumer groups before the first push, so the
//! bytes per pending job compare with and without groups.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::body::{job_body, DueTime};
use crate::client::BenchClient;
use crate::clock::now_ms;
use crate::error::{BenchError, BenchResult};
use crate::groups::{declare_all, group_names};
use crate::prng::shuffled_order;
use crate::pushers::{build_units, push_all, JobSpec, Producer, PushMode, Transport};
use crate::report::Metrics;
use crate::workload_push::{record_push_stats, record_throughput};
use crate::RunContext;

/// Parameters of workload 3.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct MemoryArgs {
    /// Jobs to push.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) n: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) body_bytes: usize,
    /// Delay of every job in ms (nothing fires during the measurement).
    #[arg(long, default_value_t = 3_600_000)]
    pub(crate) delay_ms: u64,
    /// Jobs per `/push/batch` call.
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch: usize,
    /// Batch calls in flight.
    #[arg(long, default_value_t = 1)]
    pub(crate) batch_concurrency: usize,
    /// Pause after the last ack before reading M1, so background journal writes land.
    #[arg(long, default_value_t = 1000)]
    pub(crate) settle_ms: u64,
    /// Spread the due times evenly over this many ms after `--delay-ms`, pushed in a
    /// shuffled order (0: every job is due after `--delay-ms`). W5 spreads over 30 days.
    #[arg(long, default_value_t = 0)]
    pub(crate) spread_ms: u64,
    /// mulberry32 seed of the push order when the due times are spread.
    #[arg(long, default_value_t = 5)]
    pub(crate) seed: u32,
    /// After the reading, empty Redis (`FLUSHALL`; needs `--redis-url`) and time how long
    /// until the leader's restore from the store is done: with a horizon, until `/stats`
    /// shows a loaded mark again (every job due within the horizon is back in Redis);
    /// without one, until it counts every job as delayed again.
    #[arg(long)]
    pub(crate) flush_redis: bool,
    /// How long to wait for that restore, in ms.
    #[arg(long, default_value_t = 600_000)]
    pub(crate) restore_timeout_ms: u64,
    /// Consumer groups `g0..g{N-1}` to declare on the topic before the push (0: none).
    /// No job falls due during the measurement, so none is delivered to them yet.
    #[arg(long, default_value_t = 0)]
    pub(crate) groups: usize,
}

/// How often the restore after a flush is looked at. Not more often: on a SQL store
/// `/stats` counts the live jobs from an index, a cost that grows with them, and a
/// tighter poll would slow the restore it times.
const RESTORE_POLL: Duration = Duration::from_millis(500);

/// Runs workload 3 once on `topic`.
///
/// # Errors
/// Returns invalid parameters or a failure before the measurement.
pub(crate) async fn run(args: &MemoryArgs, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
    if args.n == 0 {
        return Err(BenchError::Invalid("need n > 0".into()));
    }
    if context.probes.server.is_none() && context.probes.redis.is_none() {
        eprintln!("memory: neither --server-pid nor --redis-url given; only the push numbers will be reported");
    }
    if args.flush_redis && context.probes.redis.is_none() {
        return Err(BenchError::Invalid("--flush-redis needs --redis-url".into()));
    }
    let n = args.n as u64;
    // Spread due times are pushed out of order, as far-future jobs arrive; W3 keeps its order.
    let order = if args.spread_ms > 0 { shuffled_order(args.seed, args.n) } else { (0..args.n).collect() };
    let jobs: Vec<JobSpec> = order
        .into_iter()
        .map(|position| {
            let index = position as u64;
            let delay_ms = args.delay_ms + index * args.spread_ms / n;
            JobSpec { index, due: DueTime::DelayMs(delay_ms), body_due_ms: 0 }
        })
        .collect();
    let units =
        Arc::new(build_units(topic, &jobs, args.body_bytes, PushMode::Batch, args.batch, false, Transport::Http)?);
    let client = BenchClient::new(&context.server, args.batch_concurrency)?;
    client.open_connections(args.batch_concurrency).await?;
    client.warm_push(&format!("{topic}-warmup"), &job_body(0, 0, args.body_bytes)?).await?;
    // Before M0, so the groups' own records are not counted per job.
    declare_all(&client, topic, &group_names(args.groups)).await?;

    let before = context.probes.memory().await;
    let cpu_before = context.probes.cpu_snapshot().await;
    let start_ms = now_ms();
    let stats = push_all(&Producer::Http(client.clone()), units, args.batch_concurrency).await;
    let end_ms = now_ms();
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let after = context.probes.memory().await;
    let cpu_after = context.probes.cpu_snapshot().await;

    let mut metrics = Metrics::default();
    metrics.set("n", args.n as f64);
    record_throughput(&mut metrics, args.n, start_ms, end_ms);
    record_push_stats(&mut metrics, &stats);
    record_delta(&mut metrics, "server_rss", before.server_rss_bytes, after.server_rss_bytes, args.n);
    record_delta(
        &mut metrics,
        "redis_used_memory",
        before.redis_used_memory_bytes,
        after.redis_used_memory_bytes,
        args.n,
    );
    record_delta(&mut metrics, "server_wchar", before.server_written_bytes, after.server_written_bytes, args.n);
    for (name, value) in cpu_before.micros_per_job(&cpu_after, args.n) {
        metrics.set_some(name, value);
    }
    let delayed = match client.topic_counts(topic).await {
        Ok(counts) => counts.delay,
        Err(error) => {
            eprintln!("validity check failed: {error}");
            0
        }
    };
    metrics.set("server_delay_count", delayed as f64);
    metrics.valid = delayed == n;
    if args.flush_redis && metrics.valid {
        metrics.valid = time_restore_after_flush(args, context, &client, topic, &mut metrics).await?;
    }
    Ok(metrics)
}

/// Empties Redis and waits until the restore is done (see [`MemoryArgs::flush_redis`]);
/// records `restore_after_flush_ms` and Redis's memory then. Returns whether the
/// restore finished within `--restore-timeout-ms`.
async fn time_restore_after_flush(
    args: &MemoryArgs,
    context: &RunContext,
    client: &BenchClient,
    topic: &str,
    metrics: &mut Metrics,
) -> BenchResult<bool> {
    let Some(redis) = &context.probes.redis else { return Ok(false) };
    let horizon = client.horizon_loaded_until().await?.is_some();
    redis.flush_all().await?;
    let flushed_ms = now_ms();
    let give_up_ms = flushed_ms + args.restore_timeout_ms;
    loop {
        let restored = if horizon {
            // The mark comes back only once a load from the start is done.
            client.horizon_loaded_until().await.ok().flatten().is_some_and(|loaded| loaded >= flushed_ms)
        } else {
            // Until the restore writes the topic's first job, /stats does not name it.
            client.topic_counts(topic).await.map_or(0, |counts| counts.delay) == args.n as u64
        };
        if restored {
            metrics.set("restore_after_flush_ms", now_ms().saturating_sub(flushed_ms) as f64);
            metrics.set_some("redis_used_memory_after_restore_bytes", context.probes.redis_used_memory().await);
            return Ok(true);
        }
        if now_ms() >= give_up_ms {
            eprintln!("memory: the restore was not done after {} ms", args.restore_timeout_ms);
            return Ok(false);
        }
        tokio::time::sleep(RESTORE_POLL).await;
    }
}

/// Records `<name>_before_bytes`, `<name>_after_bytes` and `<name>_bytes_per_job`.
fn record_delta(metrics: &mut Metrics, name: &str, before: Option<f64>, after: Option<f64>, jobs: usize) {
    let (Some(before), Some(after)) = (before, after) else { return };
    metrics.set(&format!("{name}_before_bytes"), before);
    metrics.set(&format!("{name}_after_bytes"), after);
    metrics.set(&format!("{name}_bytes_per_job"), (after - before) / jobs as f64);
}
