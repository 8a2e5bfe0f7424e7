//! The conformance checks every sink passes (feature `testsuite`): each sink's
//! test file calls them with the sink and a [`Destination`] that reads back
//! what reached the broker or endpoint.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use delayq_common::{Job, Timestamp};

use crate::sink::{message_headers, Sink};

/// A message as it reached its destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// Its headers (the `delayq-*` ones at least).
    pub headers: BTreeMap<String, String>,
    /// The job's body as the message carries it.
    pub body: String,
}

/// Where a sink under test publishes to, read back.
#[async_trait]
pub trait Destination: Send + Sync {
    /// Returns every message that arrived so far.
    async fn delivered(&self) -> Vec<Delivered>;
}

/// Returns `count` plain jobs of `topic` ([`delayq_testkit::job_created_at`]),
/// due now, with distinct ids and bodies. Their attempts differ, so a sink that
/// sends anything but the job's own attempt in its header fails the checks.
pub fn sample_jobs(topic: &str, count: usize) -> Vec<Job> {
    let now = Timestamp::now();
    let topic = delayq_testkit::topic(topic);
    (0..count)
        .map(|index| {
            let id = format!("conformance-{}-{index}", now.as_millis());
            let mut job = delayq_testkit::job_created_at(&id, &topic, now, now);
            job.attempt = 1 + index as u32 % 2;
            job
        })
        .collect()
}

/// A batch is confirmed job by job, in order, and each message carries the
/// job's body and its four `delayq-*` headers.
pub async fn confirms_every_job_with_its_headers_and_body(sink: &dyn Sink, destination: &dyn Destination) {
    let jobs = sample_jobs("conformance.jobs", 5);
    let outcomes = sink.publish(&jobs).await;
    assert_eq!(outcomes.len(), jobs.len(), "one outcome per job");
    for (job, outcome) in jobs.iter().zip(&outcomes) {
        assert!(outcome.is_ok(), "job {} not confirmed: {outcome:?}", job.id);
    }
    let start = Instant::now();
    let mut delivered = destination.delivered().await;
    while delivered.len() < jobs.len() && start.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        delivered = destination.delivered().await;
    }
    assert_eq!(delivered.len(), jobs.len(), "every confirmed job reached the destination once");
    for job in &jobs {
        let message = delivered
            .iter()
            .find(|message| message.headers.get("delayq-id").map(String::as_str) == Some(job.id.as_str()))
            .unwrap_or_else(|| panic!("no message with delayq-id {}", job.id));
        assert_eq!(message.body, job.body);
        for (name, value) in message_headers(job) {
            assert_eq!(message.headers.get(name), Some(&value), "header {name}");
        }
    }
}

/// An empty batch gets no outcome and sends nothing.
pub async fn an_empty_batch_publishes_nothing(sink: &dyn Sink, destination: &dyn Destination) {
    let before = destination.delivered().await.len();
    assert!(sink.publish(&[]).await.is_empty());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(destination.delivered().await.len(), before);
}
