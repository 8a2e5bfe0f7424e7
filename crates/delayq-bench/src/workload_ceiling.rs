//! The Redis ceiling: what Redis itself does when each delayed job costs one Lua
//! call (HSET of the job's hash + ZADD to one delay set), with no delayq in the
//! way. Its jobs/s is the baseline a run of W1 is divided by, measured on the
//! same machine in the same session, so the ratio holds when the machine's
//! speed or load changes.
//!
//! The layout is the naive one (one hash key per job), like the peers' ceiling
//! driver: 50 connections, each a synchronous loop of `--pipeline` calls.

use std::sync::Arc;

use clap::Args;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use crate::body::job_body;
use crate::clock::now_ms;
use crate::error::{BenchError, BenchResult};
use crate::prng::uniform_delays;
use crate::procstat::{info_number, RedisProbe};
use crate::report::Metrics;
use crate::workload_push::record_throughput;

/// One job: its hash, then its place in the delay set.
const SCRIPT: &str = "redis.call('HSET', KEYS[1], 'topic', ARGV[1], 'body', ARGV[2]) \
                      redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1]) return 1";

/// Deletes up to 1,000 of the run's keys per call; returns how many are left.
const CLEANUP: &str = "local keys = redis.call('ZRANGE', KEYS[1], 0, 999) \
                       for _, key in ipairs(keys) do redis.call('UNLINK', key) end \
                       if #keys > 0 then redis.call('ZREM', KEYS[1], unpack(keys)) end \
                       return redis.call('ZCARD', KEYS[1])";

/// Parameters of the ceiling run.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct CeilingArgs {
    /// The Redis to measure.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub(crate) redis: String,
    /// Jobs to write.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) n: usize,
    /// Shortest delay in ms.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) delay_min_ms: u64,
    /// Longest delay in ms (inclusive).
    #[arg(long, default_value_t = 40_000)]
    pub(crate) delay_max_ms: u64,
    /// Connections, each one synchronous loop.
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Calls sent together by each connection before it waits for the answers.
    #[arg(long, default_value_t = 1)]
    pub(crate) pipeline: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) body_bytes: usize,
    /// mulberry32 seed of the delays.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u32,
}

/// Runs the ceiling once under the key prefix `topic`, then deletes its keys.
///
/// # Errors
/// Returns invalid parameters or a Redis failure.
pub(crate) async fn run(args: &CeilingArgs, topic: &str) -> BenchResult<Metrics> {
    if args.n == 0 || args.concurrency == 0 || args.pipeline == 0 || args.delay_min_ms > args.delay_max_ms {
        return Err(BenchError::Invalid(
            "need n, concurrency and pipeline > 0 and delay-min-ms <= delay-max-ms".into(),
        ));
    }
    let client = redis::Client::open(args.redis.as_str()).map_err(|error| redis_error("open", &error))?;
    let mut connections = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        let connection =
            client.get_multiplexed_async_connection().await.map_err(|error| redis_error("connect", &error))?;
        connections.push(connection);
    }
    let mut admin = connections[0].clone();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SCRIPT)
        .query_async(&mut admin)
        .await
        .map_err(|error| redis_error("SCRIPT LOAD", &error))?;
    let delay_key = format!("{topic}:delay");
    let delays = uniform_delays(args.seed, args.n, args.delay_min_ms, args.delay_max_ms);
    let bodies: Vec<String> =
        (0..args.n).map(|index| job_body(index as u64, 0, args.body_bytes)).collect::<Result<_, _>>()?;
    let jobs = Arc::new(Job { topic: topic.to_owned(), delay_key: delay_key.clone(), sha, delays, bodies });
    let probe = RedisProbe::from_url(&args.redis)?;
    let memory_before = used_memory(&probe).await?;

    let start_ms = now_ms();
    let slots = connections.into_iter().enumerate().map(|(slot, connection)| {
        let jobs = Arc::clone(&jobs);
        tokio::spawn(run_slot(jobs, connection, slot, args.concurrency, args.pipeline, start_ms))
    });
    let mut errors = 0usize;
    for slot in slots.collect::<Vec<_>>() {
        errors += match slot.await {
            Ok(Ok(())) => 0,
            Ok(Err(error)) => {
                eprintln!("ceiling slot failed: {error}");
                1
            }
            Err(error) => {
                eprintln!("ceiling slot panicked: {error}");
                1
            }
        };
    }
    let end_ms = now_ms();

    let memory_after = used_memory(&probe).await?;
    let stored: u64 = redis::cmd("ZCARD")
        .arg(&delay_key)
        .query_async(&mut admin)
        .await
        .map_err(|error| redis_error("ZCARD", &error))?;
    let mut metrics = Metrics::default();
    metrics.set("n", args.n as f64);
    metrics.set("pipeline", args.pipeline as f64);
    record_throughput(&mut metrics, args.n, start_ms, end_ms);
    metrics.set("redis_bytes_per_job", memory_after.saturating_sub(memory_before) as f64 / args.n as f64);
    metrics.set("failed_slots", errors as f64);
    metrics.valid = errors == 0 && stored == args.n as u64;
    cleanup(&mut admin, &delay_key).await?;
    Ok(metrics)
}

/// What every slot reads.
struct Job {
    topic: String,
    delay_key: String,
    sha: String,
    delays: Vec<u64>,
    bodies: Vec<String>,
}

/// Writes jobs `slot`, `slot + slots`, … in pipelines of `pipeline` calls.
async fn run_slot(
    jobs: Arc<Job>,
    mut connection: MultiplexedConnection,
    slot: usize,
    slots: usize,
    pipeline: usize,
    start_ms: u64,
) -> BenchResult<()> {
    let mine: Vec<usize> = (slot..jobs.bodies.len()).step_by(slots).collect();
    for chunk in mine.chunks(pipeline) {
        let mut pipe = redis::pipe();
        for &index in chunk {
            pipe.cmd("EVALSHA")
                .arg(&jobs.sha)
                .arg(2)
                .arg(format!("{}:job:{index}", jobs.topic))
                .arg(&jobs.delay_key)
                .arg(&jobs.topic)
                .arg(&jobs.bodies[index])
                .arg(start_ms + jobs.delays[index])
                .ignore();
        }
        pipe.query_async::<()>(&mut connection).await.map_err(|error| redis_error("EVALSHA", &error))?;
    }
    Ok(())
}

/// Reads Redis `used_memory` through the probe the other workloads use.
async fn used_memory(probe: &RedisProbe) -> BenchResult<u64> {
    let info = probe.info("memory").await?;
    info_number(&info, "used_memory")
        .map(|bytes| bytes as u64)
        .ok_or_else(|| BenchError::Protocol { from: "redis".into(), detail: "INFO memory has no used_memory".into() })
}

async fn cleanup(connection: &mut MultiplexedConnection, delay_key: &str) -> BenchResult<()> {
    loop {
        let left: u64 = redis::cmd("EVAL")
            .arg(CLEANUP)
            .arg(1)
            .arg(delay_key)
            .query_async(connection)
            .await
            .map_err(|error| redis_error("cleanup", &error))?;
        if left == 0 {
            return Ok(());
        }
    }
}

fn redis_error(action: &str, error: &redis::RedisError) -> BenchError {
    BenchError::Protocol { from: "redis".into(), detail: format!("{action}: {error}") }
}
