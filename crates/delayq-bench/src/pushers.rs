//! The producer side shared by every workload: pre-serialized push units sent by C
//! slots, each a synchronous loop that pulls the next unit from a shared counter.
//! Units travel as JSON over HTTP or as protobuf messages over gRPC.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use delayq_rpc::pb::v1::{PushBatchRequest, PushRequest};
use tokio::task::JoinSet;

use crate::body::{batch_payload, job_body, push_item, DueTime};
use crate::client::BenchClient;
use crate::clock::now_ms;
use crate::error::{BenchError, BenchResult};
use crate::grpc::{push_request, GrpcClient};

/// How jobs travel to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PushMode {
    /// One job per `POST /push`.
    Single,
    /// Up to `--batch` jobs per `POST /push/batch`.
    Batch,
}

/// Which face of the server a workload uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Transport {
    /// The REST API: `/push`, `/push/batch`, `/pop` and `/finish`, JSON.
    Http,
    /// The gRPC API: `Push`, `PushBatch`, `Pop` and `Finish`.
    Grpc,
}

/// How a workload reaches the server.
#[derive(clap::Args, Clone, Debug, serde::Serialize)]
pub(crate) struct TransportArgs {
    /// `http`: the REST API; `grpc`: the gRPC API at `--grpc-server`, pushes on one
    /// HTTP/2 connection and consumers on another. Warm-ups and checks stay on HTTP.
    #[arg(long, value_enum, default_value_t = Transport::Http)]
    pub(crate) transport: Transport,
    /// gRPC address of the server (`http://host:port`), for `--transport grpc`.
    #[arg(long, env = "DELAYQ_BENCH_GRPC_SERVER")]
    pub(crate) grpc_server: Option<String>,
}

impl TransportArgs {
    /// Returns a new gRPC connection for `--transport grpc`, `None` for HTTP.
    ///
    /// # Errors
    /// Returns [`BenchError::Invalid`] without `--grpc-server`, or a failure to connect.
    pub(crate) async fn grpc_client(&self) -> BenchResult<Option<GrpcClient>> {
        match (self.transport, &self.grpc_server) {
            (Transport::Http, _) => Ok(None),
            (Transport::Grpc, Some(url)) => Ok(Some(GrpcClient::connect(url).await?)),
            (Transport::Grpc, None) => {
                Err(BenchError::Invalid("--transport grpc needs --grpc-server (or DELAYQ_BENCH_GRPC_SERVER)".into()))
            }
        }
    }

    /// Returns the producer of `slots` slots: `http` with its connections open, or a
    /// new gRPC connection.
    ///
    /// # Errors
    /// As [`TransportArgs::grpc_client`], or a failure to open the HTTP connections.
    pub(crate) async fn producer(&self, http: &BenchClient, slots: usize) -> BenchResult<Producer> {
        match self.grpc_client().await? {
            Some(client) => Ok(Producer::Grpc(client)),
            None => {
                http.open_connections(slots).await?;
                Ok(Producer::Http(http.clone()))
            }
        }
    }
}

/// Where the producers send their units.
#[derive(Clone)]
pub(crate) enum Producer {
    /// Over HTTP; takes units built for [`Transport::Http`].
    Http(BenchClient),
    /// Over gRPC; takes units built for [`Transport::Grpc`].
    Grpc(GrpcClient),
}

/// The status the server answers a job it refuses with.
pub(crate) const REFUSED_STATUS: u16 = 400;

/// A unit's request, ready to send.
enum Payload {
    /// A `/push` body.
    Item(Bytes),
    /// A `/push` body the server must refuse with [`REFUSED_STATUS`] (the HTTP
    /// floor); any other answer counts as a refused job, that is, an error.
    RefusedItem(Bytes),
    /// A `/push/batch` body.
    Batch(Bytes),
    /// A `Push` message.
    Push(Box<PushRequest>),
    /// A `PushBatch` message.
    PushBatch(PushBatchRequest),
}

/// One request's worth of jobs, serialized before the clock starts.
pub(crate) struct PushUnit {
    payload: Payload,
    job_count: usize,
    /// Due times to check against the clock just before sending (`pushed_late`); empty
    /// when the workload does not count late pushes.
    due_ms: Vec<u64>,
}

/// One job to push: its index, due time as sent, and the `due` its body carries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct JobSpec {
    /// The job's index `i`.
    pub(crate) index: u64,
    /// What the push says about the due time.
    pub(crate) due: DueTime,
    /// The `due` field of the body (0 in workloads 1 and 3).
    pub(crate) body_due_ms: u64,
}

/// Serializes `jobs` (already in push order) into units of `batch` jobs (single mode: 1),
/// for `transport`.
///
/// When `check_late` is set each unit keeps its jobs' `runAt` to count `pushed_late`.
///
/// # Errors
/// Returns [`crate::error::BenchError::Invalid`] when `body_bytes` is too small.
pub(crate) fn build_units(
    topic: &str,
    jobs: &[JobSpec],
    body_bytes: usize,
    mode: PushMode,
    batch: usize,
    check_late: bool,
    transport: Transport,
) -> BenchResult<Vec<PushUnit>> {
    let per_unit = if mode == PushMode::Single { 1 } else { batch.max(1) };
    let mut units = Vec::with_capacity(jobs.len().div_ceil(per_unit));
    for chunk in jobs.chunks(per_unit) {
        let payload = match transport {
            Transport::Http => {
                let mut items = Vec::with_capacity(chunk.len());
                for job in chunk {
                    items.push(push_item(topic, job.due, &job_body(job.index, job.body_due_ms, body_bytes)?));
                }
                match mode {
                    PushMode::Single => Payload::Item(Bytes::from(items.pop().unwrap_or_default())),
                    PushMode::Batch => Payload::Batch(batch_payload(items.iter().map(String::as_str))),
                }
            }
            Transport::Grpc => {
                let mut requests = Vec::with_capacity(chunk.len());
                for job in chunk {
                    requests.push(push_request(topic, job.due, job_body(job.index, job.body_due_ms, body_bytes)?));
                }
                match mode {
                    PushMode::Single => Payload::Push(Box::new(requests.pop().unwrap_or_default())),
                    PushMode::Batch => Payload::PushBatch(PushBatchRequest { jobs: requests }),
                }
            }
        };
        let due_ms = if check_late { chunk.iter().map(|job| run_at_of(job.due)).collect() } else { Vec::new() };
        units.push(PushUnit { payload, job_count: chunk.len(), due_ms });
    }
    Ok(units)
}

impl PushUnit {
    /// Returns a unit of one `/push` body that the server must refuse (see [`Payload::RefusedItem`]).
    pub(crate) fn refused(payload: Bytes) -> PushUnit {
        PushUnit { payload: Payload::RefusedItem(payload), job_count: 1, due_ms: Vec::new() }
    }
}

fn run_at_of(due: DueTime) -> u64 {
    match due {
        DueTime::RunAtMs(run_at_ms) => run_at_ms,
        // A relative delay is never late by construction.
        DueTime::DelayMs(_) => u64::MAX,
    }
}

/// What the producers saw.
#[derive(Clone, Debug, Default)]
pub(crate) struct PushStats {
    /// Per-request latency in µs.
    pub(crate) latencies_us: Vec<u64>,
    /// Jobs the server refused (status or batch item error).
    pub(crate) refused_jobs: u64,
    /// Jobs in requests that failed outright.
    pub(crate) failed_jobs: u64,
    /// Requests that failed outright.
    pub(crate) failed_requests: u64,
    /// Jobs whose due time had already come when their request was sent.
    pub(crate) pushed_late: u64,
}

impl PushStats {
    fn merge(&mut self, other: PushStats) {
        self.latencies_us.extend(other.latencies_us);
        self.refused_jobs += other.refused_jobs;
        self.failed_jobs += other.failed_jobs;
        self.failed_requests += other.failed_requests;
        self.pushed_late += other.pushed_late;
    }

    /// Returns the jobs that did not get in.
    pub(crate) fn job_errors(&self) -> u64 {
        self.refused_jobs + self.failed_jobs
    }
}

impl Producer {
    /// Sends `unit`; returns how many of its jobs the server refused.
    async fn send(&self, unit: &PushUnit) -> BenchResult<usize> {
        match (self, &unit.payload) {
            (Producer::Http(client), Payload::Item(payload)) => {
                client.push(payload.clone()).await.map(|accepted| usize::from(!accepted))
            }
            (Producer::Http(client), Payload::RefusedItem(payload)) => {
                client.push_status(payload.clone()).await.map(|(status, _)| usize::from(status != REFUSED_STATUS))
            }
            (Producer::Http(client), Payload::Batch(payload)) => {
                client.push_batch(payload.clone(), unit.job_count).await
            }
            (Producer::Grpc(client), Payload::Push(request)) => {
                client.push(PushRequest::clone(request)).await.map(|accepted| usize::from(!accepted))
            }
            (Producer::Grpc(client), Payload::PushBatch(request)) => {
                client.push_batch(request.clone(), unit.job_count).await
            }
            _ => Err(BenchError::Invalid("a push unit was built for the other transport".into())),
        }
    }
}

/// Sends every unit with `concurrency` slots in flight and waits for the last answer.
pub(crate) async fn push_all(producer: &Producer, units: Arc<Vec<PushUnit>>, concurrency: usize) -> PushStats {
    let next_unit = Arc::new(AtomicUsize::new(0));
    let mut slots = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let slot_producer = producer.clone();
        let slot_units = Arc::clone(&units);
        let slot_next = Arc::clone(&next_unit);
        slots.spawn(async move { push_slot(&slot_producer, &slot_units, &slot_next).await });
    }
    let mut total = PushStats::default();
    while let Some(joined) = slots.join_next().await {
        match joined {
            Ok(slot_stats) => total.merge(slot_stats),
            Err(error) => eprintln!("a push slot died: {error}"),
        }
    }
    total
}

async fn push_slot(producer: &Producer, units: &[PushUnit], next_unit: &AtomicUsize) -> PushStats {
    let mut stats = PushStats { latencies_us: Vec::with_capacity(units.len() / 16 + 1), ..PushStats::default() };
    loop {
        let unit_index = next_unit.fetch_add(1, Ordering::Relaxed);
        let Some(unit) = units.get(unit_index) else { break };
        if !unit.due_ms.is_empty() {
            let now = now_ms();
            stats.pushed_late += unit.due_ms.iter().filter(|due_ms| **due_ms <= now).count() as u64;
        }
        let sent_at = Instant::now();
        let outcome = producer.send(unit).await;
        stats.latencies_us.push(sent_at.elapsed().as_micros() as u64);
        match outcome {
            Ok(refused) => stats.refused_jobs += refused as u64,
            Err(error) => {
                if stats.failed_requests == 0 {
                    eprintln!("push failed: {error}");
                }
                stats.failed_requests += 1;
                stats.failed_jobs += unit.job_count as u64;
            }
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(count: u64) -> Vec<JobSpec> {
        (0..count)
            .map(|index| JobSpec { index, due: DueTime::RunAtMs(1000 + index), body_due_ms: 1000 + index })
            .collect()
    }

    #[test]
    fn batch_units_hold_up_to_batch_jobs() {
        let Ok(units) = build_units("t", &jobs(5), 100, PushMode::Batch, 2, true, Transport::Http) else {
            panic!("fits")
        };
        assert_eq!(units.iter().map(|unit| unit.job_count).collect::<Vec<_>>(), vec![2, 2, 1]);
        assert_eq!(units[1].due_ms, vec![1002, 1003]);
        let Payload::Batch(payload) = &units[0].payload else { panic!("a /push/batch body") };
        let Ok(payload) = serde_json::from_slice::<serde_json::Value>(payload) else { panic!("json") };
        assert_eq!(payload["jobs"][1]["runAt"], 1001);
        let Some(body) = payload["jobs"][1]["body"].as_str() else { panic!("body is a string") };
        assert_eq!(body.len(), 100);
    }

    #[test]
    fn single_units_are_one_push_each() {
        let Ok(units) = build_units("t", &jobs(3), 100, PushMode::Single, 1000, false, Transport::Http) else {
            panic!("fits")
        };
        assert_eq!(units.len(), 3);
        assert!(units[2].due_ms.is_empty());
        let Payload::Item(item) = &units[2].payload else { panic!("a /push body") };
        let Ok(item) = serde_json::from_slice::<serde_json::Value>(item) else { panic!("json") };
        assert_eq!(item["topic"], "t");
        assert!(item["body"].as_str().is_some_and(|body| body.starts_with("{\"i\":2,\"due\":1002,")));
    }

    #[test]
    fn grpc_units_carry_the_same_jobs() {
        let Ok(units) = build_units("t", &jobs(3), 100, PushMode::Batch, 2, false, Transport::Grpc) else {
            panic!("fits")
        };
        assert_eq!(units.iter().map(|unit| unit.job_count).collect::<Vec<_>>(), vec![2, 1]);
        let Payload::PushBatch(batch) = &units[0].payload else { panic!("a PushBatch message") };
        assert_eq!(batch.jobs.len(), 2);
        assert_eq!(
            (batch.jobs[1].topic.as_str(), batch.jobs[1].run_at, batch.jobs[1].delay_ms),
            ("t", Some(1001), None)
        );
        assert!(batch.jobs[1].body.as_ref().is_some_and(|body| body.len() == 100 && body.starts_with("{\"i\":1,")));
        let Payload::PushBatch(last) = &units[1].payload else { panic!("a batch of one stays a batch") };
        assert_eq!(last.jobs.len(), 1);

        let delayed = [JobSpec { index: 7, due: DueTime::DelayMs(250), body_due_ms: 0 }];
        let Ok(single) = build_units("t", &delayed, 100, PushMode::Single, 1000, false, Transport::Grpc) else {
            panic!("fits")
        };
        let Payload::Push(push) = &single[0].payload else { panic!("a Push message") };
        assert_eq!((push.delay_ms, push.run_at), (Some(250), None));
    }

    #[test]
    fn a_unit_for_the_other_transport_is_an_error() {
        let Ok(units) = build_units("t", &jobs(1), 100, PushMode::Single, 1, false, Transport::Grpc) else {
            panic!("fits")
        };
        let Ok(client) = BenchClient::new("http://127.0.0.1:9", 1) else { panic!("client") };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let Ok(runtime) = runtime else { panic!("runtime") };
        let outcome = runtime.block_on(Producer::Http(client).send(&units[0]));
        assert!(matches!(outcome, Err(BenchError::Invalid(_))), "{outcome:?}");
    }
}
