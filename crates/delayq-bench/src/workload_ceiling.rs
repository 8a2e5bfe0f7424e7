//! The Redis ceiling: what Redis itself does when each delayed job costs one Lua
//! call (HSET of the job's hash + ZADD to one delay set), with no delayq in the
//! way. Its jobs/s is the baseline a run of W1 is divided by, measured on the
//! same machine in the same session, so the ratio holds when the machine's
//! speed or load changes.
//!
//! The load comes from `redis-benchmark`, run exactly as the benchmark
//! definitions run it for the peers' table: `-c 50 -P {1,64} -r 1e9`, 200,000
//! calls at pipeline 1 and 600,000 at a higher one, each call
//! `EVALSHA <sha> 0 <rand id> <rand score> <100 B body>`. Both the number of
//! calls and the client matter: a smaller key space is cheaper to grow, so
//! fewer calls give a higher ceiling, and a client slower than
//! `redis-benchmark` at high pipelines gives a lower one.
//!
//! The keys carry the run's prefix, so that a run deletes exactly its own; the
//! prefix makes each job's key about 30 bytes longer than the definitions'
//! `job:<id>`, which shows in the bytes per job, not in the rate.

use std::process::Command;

use clap::Args;
use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo};
use serde::Serialize;

use crate::body::job_body;
use crate::clock::now_ms;
use crate::error::{BenchError, BenchResult};
use crate::procstat::{info_number, RedisProbe};
use crate::report::Metrics;

/// Deletes up to 1,000 of the run's jobs per call; returns how many are left.
/// KEYS[1] is the delay set, ARGV[1] the prefix of a job's key before its id.
const CLEANUP: &str = "local ids = redis.call('ZRANGE', KEYS[1], 0, 999) \
                       for _, id in ipairs(ids) do redis.call('UNLINK', ARGV[1] .. id) end \
                       if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end \
                       return redis.call('ZCARD', KEYS[1])";

/// The range `redis-benchmark -r` draws ids and scores from.
const RANDOM_RANGE: u64 = 1_000_000_000;

/// Calls at pipeline 1 and at a higher pipeline, as the definitions run them.
const DEFINED_CALLS_PIPELINE_1: usize = 200_000;
const DEFINED_CALLS_PIPELINED: usize = 600_000;

/// Parameters of the ceiling run.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct CeilingArgs {
    /// The Redis to measure.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub(crate) redis: String,
    /// The `redis-benchmark` program (Debian package redis-tools).
    #[arg(long, default_value = "redis-benchmark")]
    pub(crate) redis_benchmark: String,
    /// Jobs to write [default: 200,000 at pipeline 1, 600,000 at a higher pipeline].
    #[arg(long)]
    pub(crate) n: Option<usize>,
    /// Connections `redis-benchmark` opens (`-c`).
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Calls sent together by each connection before it waits for the answers.
    #[arg(long, default_value_t = 1)]
    pub(crate) pipeline: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) body_bytes: usize,
}

impl CeilingArgs {
    /// The jobs one run writes.
    fn jobs(&self) -> usize {
        match self.n {
            Some(n) => n,
            None if self.pipeline <= 1 => DEFINED_CALLS_PIPELINE_1,
            None => DEFINED_CALLS_PIPELINED,
        }
    }
}

/// The run's two kinds of key.
struct Keys {
    /// The delay set.
    delayed: String,
    /// A job's hash is this followed by its id.
    job_prefix: String,
}

impl Keys {
    fn of_run(topic: &str) -> Keys {
        Keys { delayed: format!("{topic}:delayed"), job_prefix: format!("{topic}:job:") }
    }

    /// One job: `HSET <job key> body <body>; ZADD <delay set> <score> <id>`,
    /// with ARGV = id, score, body, and the keys written into the script (the
    /// call names no keys, as the definitions' does).
    fn script(&self) -> String {
        format!(
            "redis.call('HSET', {prefix} .. ARGV[1], 'body', ARGV[3]) \
             redis.call('ZADD', {delayed}, ARGV[2], ARGV[1]) return 1",
            prefix = lua_string(&self.job_prefix),
            delayed = lua_string(&self.delayed),
        )
    }
}

/// `text` as a Lua string literal: every byte but letters, digits and a few
/// safe marks as a decimal escape.
fn lua_string(text: &str) -> String {
    let mut literal = String::with_capacity(text.len() + 2);
    literal.push('\'');
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_:.".contains(&byte) {
            literal.push(char::from(byte));
        } else {
            literal.push_str(&format!("\\{byte:03}"));
        }
    }
    literal.push('\'');
    literal
}

/// Runs the ceiling once under the key prefix `topic`, then deletes its keys.
///
/// # Errors
/// Returns invalid parameters, a Redis failure, or a `redis-benchmark` that
/// cannot be run or fails.
pub(crate) async fn run(args: &CeilingArgs, topic: &str) -> BenchResult<Metrics> {
    let n = args.jobs();
    if n == 0 || args.concurrency == 0 || args.pipeline == 0 {
        return Err(BenchError::Invalid("need n, concurrency and pipeline > 0".into()));
    }
    let client = redis::Client::open(args.redis.as_str()).map_err(|error| redis_error("open", &error))?;
    let mut admin = client.get_multiplexed_async_connection().await.map_err(|error| redis_error("connect", &error))?;
    let keys = Keys::of_run(topic);
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(keys.script())
        .query_async(&mut admin)
        .await
        .map_err(|error| redis_error("SCRIPT LOAD", &error))?;
    let body = job_body(0, 0, args.body_bytes)?;
    let probe = RedisProbe::from_url(&args.redis)?;
    let memory_before = used_memory(&probe).await?;

    let start_ms = now_ms();
    let driven = run_redis_benchmark(args, n, &sha, body).await;
    let end_ms = now_ms();
    let rate = match driven {
        Ok(rate) => rate,
        Err(error) => {
            // What the run wrote before it failed is deleted all the same.
            if let Err(cleanup_error) = cleanup(&mut admin, &keys).await {
                eprintln!("ceiling: the run's keys were not deleted: {cleanup_error}");
            }
            return Err(error);
        }
    };

    let memory_after = used_memory(&probe).await?;
    let stored: u64 = redis::cmd("ZCARD")
        .arg(&keys.delayed)
        .query_async(&mut admin)
        .await
        .map_err(|error| redis_error("ZCARD", &error))?;
    let mut metrics = Metrics::default();
    metrics.set("n", n as f64);
    metrics.set("pipeline", args.pipeline as f64);
    // The rate redis-benchmark reports is the defined one; the elapsed time
    // also holds its start and its connecting.
    metrics.set("elapsed_ms", end_ms.saturating_sub(start_ms) as f64);
    metrics.set("jobs_per_s", rate);
    metrics.set("stored_jobs", stored as f64);
    metrics.set("redis_bytes_per_job", memory_after.saturating_sub(memory_before) as f64 / stored.max(1) as f64);
    metrics.valid = stored >= least_distinct(n);
    cleanup(&mut admin, &keys).await?;
    Ok(metrics)
}

/// The fewest distinct jobs a complete run leaves. redis-benchmark draws each
/// id at random from 10^9, so about n²/(2·10^9) calls repeat an earlier id
/// (180 of 600,000); a run that lost more than a thousandth of its calls did
/// not complete.
fn least_distinct(n: usize) -> u64 {
    let n = n as u64;
    n - n / 1000
}

/// Runs `redis-benchmark` for `n` calls; returns the calls per second it reports.
async fn run_redis_benchmark(args: &CeilingArgs, n: usize, sha: &str, body: String) -> BenchResult<f64> {
    let mut command = Command::new(&args.redis_benchmark);
    command.args(redis_benchmark_target(&args.redis)?);
    command.args([
        "-c".to_owned(),
        args.concurrency.to_string(),
        "-P".to_owned(),
        args.pipeline.to_string(),
        "-r".to_owned(),
        RANDOM_RANGE.to_string(),
        "-n".to_owned(),
        n.to_string(),
        "--csv".to_owned(),
        "EVALSHA".to_owned(),
        sha.to_owned(),
        "0".to_owned(),
        "__rand_int__".to_owned(),
        "__rand_int__".to_owned(),
        body,
    ]);
    let program = args.redis_benchmark.clone();
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(|error| BenchError::Invalid(format!("the thread running {program} failed: {error}")))?
        .map_err(|error| {
            BenchError::io(format!("run {} (Debian: apt-get install redis-tools)", args.redis_benchmark), error)
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(BenchError::Protocol {
            from: args.redis_benchmark.clone(),
            detail: format!("{}: {} {}", output.status, stdout.trim(), String::from_utf8_lossy(&output.stderr).trim()),
        });
    }
    csv_rate(&stdout).ok_or_else(|| BenchError::Protocol {
        from: args.redis_benchmark.clone(),
        detail: format!("no calls per second in its answer: {}", stdout.trim()),
    })
}

/// The connection flags of `redis-benchmark` for a `redis://` or `redis+unix://` URL.
fn redis_benchmark_target(url: &str) -> BenchResult<Vec<String>> {
    let info = url
        .into_connection_info()
        .map_err(|error| BenchError::Invalid(format!("redis must be a Redis URL: {error}")))?;
    let mut flags = match info.addr() {
        ConnectionAddr::Tcp(host, port) => vec!["-h".to_owned(), host.clone(), "-p".to_owned(), port.to_string()],
        ConnectionAddr::Unix(path) => vec!["-s".to_owned(), path.display().to_string()],
        _ => return Err(BenchError::Invalid(format!("redis: the ceiling does not speak TLS ({url})"))),
    };
    let settings = info.redis_settings();
    if let Some(user) = settings.username() {
        flags.extend(["--user".to_owned(), user.to_owned()]);
    }
    if let Some(password) = settings.password() {
        flags.extend(["-a".to_owned(), password.to_owned(), "--no-auth-warning".to_owned()]);
    }
    if settings.db() != 0 {
        flags.extend(["--dbnum".to_owned(), settings.db().to_string()]);
    }
    Ok(flags)
}

/// The `rps` column of the one test in `redis-benchmark --csv` output. The
/// test's name is the command, which it prints unescaped (the body holds commas
/// and quotes), so the row's fields are counted from its end.
fn csv_rate(csv: &str) -> Option<f64> {
    let mut lines = csv.lines().filter(|line| !line.trim().is_empty());
    let header: Vec<&str> = lines.next()?.split(',').map(|name| name.trim_matches('"')).collect();
    let from_end = header.len().checked_sub(header.iter().position(|name| *name == "rps")?)?;
    let row: Vec<&str> = lines.next()?.rsplitn(header.len(), ',').collect();
    row.get(from_end.checked_sub(1)?)?.trim_matches('"').parse().ok()
}

/// Reads Redis `used_memory` through the probe the other workloads use.
async fn used_memory(probe: &RedisProbe) -> BenchResult<u64> {
    let info = probe.info("memory").await?;
    info_number(&info, "used_memory")
        .map(|bytes| bytes as u64)
        .ok_or_else(|| BenchError::Protocol { from: "redis".into(), detail: "INFO memory has no used_memory".into() })
}

async fn cleanup(connection: &mut MultiplexedConnection, keys: &Keys) -> BenchResult<()> {
    loop {
        let left: u64 = redis::cmd("EVAL")
            .arg(CLEANUP)
            .arg(1)
            .arg(&keys.delayed)
            .arg(&keys.job_prefix)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> CeilingArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: CeilingArgs,
        }
        let mut argv = vec!["ceiling"];
        argv.extend_from_slice(extra);
        match Wrapper::try_parse_from(argv) {
            Ok(wrapper) => wrapper.args,
            Err(error) => panic!("flags parse: {error}"),
        }
    }

    #[test]
    fn the_defined_run_sizes_follow_the_pipeline() {
        assert_eq!(args(&[]).jobs(), 200_000);
        assert_eq!(args(&["--pipeline", "64"]).jobs(), 600_000);
        assert_eq!(args(&["--pipeline", "64", "--n", "5"]).jobs(), 5);
    }

    #[test]
    fn the_rate_is_read_from_the_csv_answer() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\"\n\
                   \"EVALSHA abc 0 __rand_int__ {\"i\":0,\"pad\":\"xx\"}\",\"89766.61\",\"0.501\",\"0.100\"\n";
        assert_eq!(csv_rate(csv), Some(89_766.61));
        assert_eq!(csv_rate("\"test\",\"avg\"\n\"x\",\"1\"\n"), None);
        assert_eq!(csv_rate(""), None);
    }

    #[test]
    fn the_connection_flags_come_from_the_url() {
        let Ok(flags) = redis_benchmark_target("redis://user:secret@127.0.0.1:6380/2") else { panic!("a valid URL") };
        assert_eq!(
            flags,
            ["-h", "127.0.0.1", "-p", "6380", "--user", "user", "-a", "secret", "--no-auth-warning", "--dbnum", "2"]
        );
        assert!(redis_benchmark_target("http://127.0.0.1").is_err());
    }

    #[test]
    fn key_names_are_escaped_into_the_script() {
        assert_eq!(lua_string("bench-ceiling:1"), "'bench-ceiling:1'");
        assert_eq!(lua_string("a'b\\c"), "'a\\039b\\092c'");
        let script = Keys::of_run("t").script();
        assert!(script.contains("'t:job:' .. ARGV[1]"), "{script}");
        assert!(script.contains("'ZADD', 't:delayed', ARGV[2], ARGV[1]"), "{script}");
    }

    fn redis_url() -> Option<String> {
        delayq_testkit::service("DELAYQ_TEST_REDIS_URL")
    }

    /// Against the real Redis and the real redis-benchmark:
    /// every call lands, the rate and the memory are read, and the run's keys
    /// are gone afterwards.
    #[tokio::test]
    async fn a_run_writes_its_jobs_and_deletes_them_afterwards() {
        let Some(url) = redis_url() else { return };
        let driver = "redis-benchmark";
        for pipeline in ["1", "16"] {
            let topic = format!("ceiling-test-{}-{pipeline}", std::process::id());
            let flags = ["--redis", &url, "--pipeline", pipeline, "--n", "3000", "--concurrency", "8"];
            let metrics = match run(&args(&flags), &topic).await {
                Ok(metrics) => metrics,
                Err(error) => panic!("{driver} at pipeline {pipeline}: {error}"),
            };
            assert!(metrics.valid, "{driver} at pipeline {pipeline}: {metrics:?}");
            let stored = metrics.get("stored_jobs").unwrap_or_default();
            // redis-benchmark may send up to a pipeline per connection more than asked.
            assert!((2997.0..=3000.0 + 8.0 * 16.0).contains(&stored), "{driver}: {stored} jobs stored");
            assert!(metrics.get("jobs_per_s").unwrap_or_default() > 0.0, "{driver}: {metrics:?}");
            assert!(metrics.get("redis_bytes_per_job").unwrap_or_default() > 100.0, "{driver}: {metrics:?}");

            let Ok(client) = redis::Client::open(url.as_str()) else { panic!("a valid URL") };
            let Ok(mut connection) = client.get_multiplexed_async_connection().await else { panic!("Redis is up") };
            let left: Vec<String> =
                match redis::cmd("KEYS").arg(format!("{topic}:*")).query_async(&mut connection).await {
                    Ok(keys) => keys,
                    Err(error) => panic!("KEYS: {error}"),
                };
            assert!(left.is_empty(), "{driver} left {} keys", left.len());
        }
    }

    /// A redis-benchmark that cannot be run is an error that names it and how to get it.
    #[tokio::test]
    async fn a_missing_redis_benchmark_is_named() {
        let Some(url) = redis_url() else { return };
        let topic = format!("ceiling-test-{}-missing", std::process::id());
        let flags = ["--redis", &url, "--redis-benchmark", "/nonexistent/redis-benchmark", "--n", "10"];
        match run(&args(&flags), &topic).await {
            Ok(metrics) => panic!("a run without its program: {metrics:?}"),
            Err(error) => {
                let message = format!("{error}");
                assert!(message.contains("/nonexistent/redis-benchmark"), "{message}");
                assert!(message.contains("redis-tools"), "{message}");
            }
        }
    }

    #[test]
    fn a_run_with_repeated_random_ids_is_complete_but_one_that_lost_calls_is_not() {
        assert_eq!(least_distinct(600_000), 599_400);
    }
}
