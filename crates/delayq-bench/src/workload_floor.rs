//! The HTTP floor: what one request costs on this machine before any queue work.
//!
//! N requests, C in flight, exactly as W1's single pushes (the same driver, the
//! same 100-byte job, the same connections), except that each job carries
//! `"delay":-1`: the server reads the whole request, parses and validates the
//! job, and answers 400 naming `delay` without touching the store or the
//! scheduler. Its rate bounds what any `/push` can reach here, since a push
//! does all of this and then stores and schedules the job; divided by the
//! ceiling of the same repetition it tells how much of the ceiling the
//! transport alone leaves.

use std::sync::Arc;

use bytes::Bytes;
use clap::Args;
use serde::Serialize;

use crate::body::job_body;
use crate::client::BenchClient;
use crate::clock::now_ms;
use crate::error::{BenchError, BenchResult};
use crate::pushers::{push_all, Producer, PushUnit, REFUSED_STATUS};
use crate::report::Metrics;
use crate::workload_push::{record_push_stats, record_throughput};
use crate::RunContext;

/// Parameters of the floor.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct FloorArgs {
    /// Requests to send.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) n: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) body_bytes: usize,
}

/// Returns the `/push` payload of job `index` that the server refuses for its delay.
fn refused_item(topic: &str, index: u64, body_bytes: usize) -> BenchResult<Bytes> {
    let topic = serde_json::Value::from(topic).to_string();
    let body = serde_json::Value::from(job_body(index, 0, body_bytes)?).to_string();
    Ok(Bytes::from(format!("{{\"topic\":{topic},\"delay\":-1,\"body\":{body}}}")))
}

/// Runs the floor once on `topic` (which never gets a job).
///
/// # Errors
/// Returns invalid parameters or a failure before the timed phase.
pub(crate) async fn run(args: &FloorArgs, context: &RunContext, topic: &str) -> BenchResult<Metrics> {
    if args.n == 0 || args.concurrency == 0 {
        return Err(BenchError::Invalid("need n > 0 and concurrency > 0".into()));
    }
    let items =
        (0..args.n as u64).map(|index| refused_item(topic, index, args.body_bytes)).collect::<Result<Vec<_>, _>>()?;
    let client = BenchClient::new(&context.server, args.concurrency)?;
    client.open_connections(args.concurrency).await?;
    // The warm-up and a check that the server refuses these requests as expected.
    let Some(first_item) = items.first() else {
        return Err(BenchError::Invalid("need n > 0".into()));
    };
    let (status, answer) = client.push_status(first_item.clone()).await?;
    if status != REFUSED_STATUS {
        return Err(BenchError::Protocol {
            from: "/push".into(),
            detail: format!(
                "a job with delay -1 got {status}, not {REFUSED_STATUS}: {}",
                String::from_utf8_lossy(&answer)
            ),
        });
    }
    let units = Arc::new(items.into_iter().map(PushUnit::refused).collect::<Vec<_>>());

    let cpu_before = context.probes.cpu_snapshot().await;
    let start_ms = now_ms();
    // Sent as W1 sends its single pushes; an answer other than 400 counts as a refused job.
    let stats = push_all(&Producer::Http(client), units, args.concurrency).await;
    let end_ms = now_ms();
    let cpu_after = context.probes.cpu_snapshot().await;

    let mut metrics = Metrics::default();
    metrics.set("n", args.n as f64);
    metrics.set("requests", args.n as f64);
    record_throughput(&mut metrics, args.n, start_ms, end_ms);
    record_push_stats(&mut metrics, &stats);
    for (name, value) in cpu_before.micros_per_job(&cpu_after, args.n) {
        metrics.set_some(name, value);
    }
    // Valid when every request got its 400.
    metrics.valid = stats.job_errors() == 0;
    Ok(metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refused_item_is_a_push_with_a_negative_delay() {
        let Ok(item) = refused_item("t-1", 7, 100) else { panic!("fits") };
        let Ok(item) = serde_json::from_slice::<serde_json::Value>(&item) else { panic!("json") };
        assert_eq!(item["topic"], "t-1");
        assert_eq!(item["delay"], -1);
        assert!(item["body"].as_str().is_some_and(|body| body.len() == 100 && body.starts_with("{\"i\":7,")));
        assert!(refused_item("t", 0, 5).is_err(), "too small a body is refused");
    }
}
