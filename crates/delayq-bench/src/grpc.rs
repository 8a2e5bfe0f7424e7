//! The gRPC client of the workloads: `Push`, `PushBatch`, `Pop` and `Finish` of
//! `delayq.v1.DelayQueueService`, each client one HTTP/2 connection that every
//! slot using it shares (tonic multiplexes the slots' calls on it, as a gRPC
//! client application would).
//!
//! The messages are built before the clock starts, like the HTTP bodies; a
//! slot clones its unit's message to send it, which is part of the client's
//! CPU the workloads report.

use delayq_rpc::pb::v1::delay_queue_service_client::DelayQueueServiceClient;
use delayq_rpc::pb::v1::{push_batch_item, FinishRequest, PopRequest, PushBatchRequest, PushRequest};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use crate::body::DueTime;
use crate::client::PoppedJob;
use crate::error::{BenchError, BenchResult};

/// A delayq server reached over gRPC.
#[derive(Clone)]
pub(crate) struct GrpcClient {
    client: DelayQueueServiceClient<Channel>,
    url: String,
}

impl GrpcClient {
    /// Connects to the gRPC address `url` (`http://host:port`).
    ///
    /// # Errors
    /// Returns [`BenchError::Invalid`] for an unusable address and
    /// [`BenchError::Http`] when the connection fails.
    pub(crate) async fn connect(url: &str) -> BenchResult<GrpcClient> {
        let endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|error| BenchError::Invalid(format!("grpc-server {url:?}: {error}")))?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|error| BenchError::Http { url: url.to_owned(), source: Box::new(error) })?;
        Ok(GrpcClient { client: DelayQueueServiceClient::new(channel), url: url.to_owned() })
    }

    /// Pushes one job; `Ok(false)` when the server refused it.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] when the call itself failed.
    pub(crate) async fn push(&self, request: PushRequest) -> BenchResult<bool> {
        self.accepted(self.client.clone().push(request).await)
    }

    /// Pushes a batch of `job_count` jobs; returns how many were refused.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] when the call failed and
    /// [`BenchError::Protocol`] when the answer has not one item per job.
    pub(crate) async fn push_batch(&self, request: PushBatchRequest, job_count: usize) -> BenchResult<usize> {
        let reply = match self.client.clone().push_batch(request).await {
            Ok(reply) => reply.into_inner(),
            Err(status) if is_refusal(status.code()) => return Ok(job_count),
            Err(status) => return Err(self.failed(status)),
        };
        if reply.items.len() != job_count {
            return Err(BenchError::Protocol {
                from: self.url.clone(),
                detail: format!("{} outcomes for {job_count} jobs", reply.items.len()),
            });
        }
        Ok(reply.items.iter().filter(|item| !matches!(item.outcome, Some(push_batch_item::Outcome::Pushed(_)))).count())
    }

    /// Reserves jobs as `request` asks (a long-poll when it has a timeout).
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] when the call failed.
    pub(crate) async fn pop(&self, request: PopRequest) -> BenchResult<Vec<PoppedJob>> {
        let reply = self.client.clone().pop(request).await.map_err(|status| self.failed(status))?;
        Ok(reply
            .into_inner()
            .jobs
            .into_iter()
            .map(|job| PoppedJob {
                id: job.id,
                run_at_ms: u64::try_from(job.run_at).unwrap_or(0),
                body: job.body,
                group: job.group,
            })
            .collect())
    }

    /// Finishes a reserved job; `Ok(false)` when the server refused.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] when the call itself failed.
    pub(crate) async fn finish(&self, job_id: String) -> BenchResult<bool> {
        self.accepted(
            self.client.clone().finish(FinishRequest { id: job_id, result: None, attempt: None, group: None }).await,
        )
    }

    /// `Ok(true)` for an answer, `Ok(false)` for a refusal, else the call's failure.
    fn accepted<T>(&self, outcome: Result<T, tonic::Status>) -> BenchResult<bool> {
        match outcome {
            Ok(_) => Ok(true),
            Err(status) if is_refusal(status.code()) => Ok(false),
            Err(status) => Err(self.failed(status)),
        }
    }

    fn failed(&self, status: tonic::Status) -> BenchError {
        BenchError::Http { url: self.url.clone(), source: Box::new(status) }
    }
}

/// Whether a status is the server judging the job (the HTTP 4xx family), not
/// the call failing.
fn is_refusal(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument | Code::AlreadyExists | Code::FailedPrecondition | Code::NotFound | Code::OutOfRange
    )
}

/// The `Push` message of one job: the same topic, due time and body as the
/// HTTP item of [`crate::body::push_item`].
pub(crate) fn push_request(topic: &str, due: DueTime, body: String) -> PushRequest {
    let (delay_ms, run_at) = match due {
        DueTime::DelayMs(delay_ms) => (Some(saturating_i64(delay_ms)), None),
        DueTime::RunAtMs(run_at_ms) => (None, Some(saturating_i64(run_at_ms))),
    };
    PushRequest { topic: topic.to_owned(), body: Some(body), delay_ms, run_at, ..PushRequest::default() }
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use delayq_common::{Snowflake, Topic};
    use delayq_queue::{DelayQueue, MemoryScheduler, QueueSettings};
    use delayq_rpc::RpcConfig;
    use delayq_store::SqliteStore;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// Pushes, pops and finishes over gRPC against the real service (memory
    /// scheduler, SQLite store, the timer running).
    #[tokio::test]
    async fn calls_reach_the_service_and_refusals_are_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open_in(dir.path(), "bench-test".into()).await.expect("open the store");
        let queue = Arc::new(DelayQueue::new(
            Arc::new(MemoryScheduler::new()),
            Arc::new(store),
            Snowflake::new(1),
            QueueSettings::default(),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let stop = CancellationToken::new();
        let timer = tokio::spawn(delayq_queue::run_timer(Arc::clone(&queue), stop.clone()));
        let server = tokio::spawn(delayq_rpc::serve(
            listener,
            Arc::clone(&queue),
            RpcConfig::default(),
            stop.clone().cancelled_owned(),
        ));
        let client = GrpcClient::connect(&url).await.expect("connect");

        let body = || "x".repeat(100);
        assert!(client.push(push_request("bench-grpc", DueTime::DelayMs(60_000), body())).await.expect("push"));
        let mut batch = PushBatchRequest {
            jobs: (0..4).map(|_| push_request("bench-grpc", DueTime::DelayMs(60_000), body())).collect(),
        };
        batch.jobs[2].topic = "not a topic".into();
        assert_eq!(client.push_batch(batch, 4).await.expect("batch"), 1, "the bad topic is refused, alone");
        assert!(!client.push(push_request("", DueTime::DelayMs(1), body())).await.expect("answered"));

        let stats = queue.stats().await.expect("stats");
        let topic = Topic::parse("bench-grpc").expect("topic");
        let delayed = stats.live.iter().find(|counts| counts.topic == topic).map(|counts| counts.delay);
        assert_eq!(delayed, Some(4), "{stats:?}");

        assert!(client.push(push_request("bench-due", DueTime::DelayMs(0), body())).await.expect("push"));
        let pop = PopRequest {
            topic: "bench-due".into(),
            count: Some(10),
            timeout_ms: Some(5_000),
            consumer: None,
            group: None,
        };
        let popped = client.pop(pop).await.expect("pop");
        assert_eq!(popped.len(), 1, "the due job, and only it");
        assert_eq!(popped[0].body, body());
        assert!(popped[0].run_at_ms > 0);
        assert!(client.finish(popped[0].id.clone()).await.expect("finish"));
        assert!(!client.finish(popped[0].id.clone()).await.expect("answered"), "a finished job is refused");
        stop.cancel();
        let _ = server.await;
        let _ = timer.await;
    }
}
