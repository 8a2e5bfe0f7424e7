//! The forwarder loop with a sink that panics (as a driver bug would): the
//! batch is not stranded until its ttr, only the job that makes the sink panic
//! fails, and the forwarder goes on forwarding.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::Harness;
use delayq_common::{Job, JobState};
use delayq_forward::{Sink, SinkError};
use delayq_testkit::eventually;
use serde_json::json;

/// Confirms every job, but panics when it reaches a job whose body is `boom`,
/// after having taken the jobs before it.
#[derive(Default)]
struct PanickingSink {
    received: Mutex<Vec<String>>,
}

impl PanickingSink {
    fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for id in self.received.lock().unwrap().iter() {
            *counts.entry(id.clone()).or_insert(0) += 1;
        }
        counts
    }
}

#[async_trait]
impl Sink for PanickingSink {
    fn kind(&self) -> &'static str {
        "panicking"
    }

    async fn publish(&self, jobs: &[Job]) -> Vec<Result<(), SinkError>> {
        for job in jobs {
            assert_ne!(job.body, "boom", "a driver bug");
            self.received.lock().unwrap().push(job.id.to_string());
        }
        jobs.iter().map(|_| Ok(())).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_panics_strands_no_batch_and_fails_only_the_job_that_causes_it() {
    let sink = Arc::new(PanickingSink::default());
    let harness = Harness::start(&["panic.*"], sink.clone(), |_| {}).await;
    // A ttr far past the test's limits: a stranded job would stay reserved throughout.
    let job = |body: String| {
        json!({"topic": "panic.jobs", "body": body, "delay": 300, "ttr": 600_000,
               "maxRetries": 1, "retryBackoff": [100]})
    };
    let mut jobs: Vec<_> = (0..99).map(|i| job(format!("job-{i}"))).collect();
    jobs.insert(50, job("boom".to_owned()));
    let ids = harness.push_all(jobs).await;
    let boom = ids[50].clone();
    let ordinary: Vec<_> = ids.iter().filter(|id| **id != boom).cloned().collect();

    let settled = eventually(Duration::from_secs(10), || async {
        for id in &ordinary {
            if harness.state(id).await != JobState::Finished {
                return false;
            }
        }
        harness.state(&boom).await == JobState::Dead
    })
    .await;
    assert!(settled, "the 99 batch-mates are finished and the job that panics the sink is dead");
    let counts = sink.counts();
    for id in &ordinary {
        assert!(counts.contains_key(id.as_str()), "job {id} never reached the sink");
    }
    assert!(!counts.contains_key(boom.as_str()));
    let duplicates: usize = counts.values().map(|count| count - 1).sum();
    let counters = harness.route().counters();
    assert!(
        duplicates as u64 <= counters.unconfirmed(),
        "{duplicates} duplicates, {} counted as possible",
        counters.unconfirmed()
    );
    assert_eq!(counters.dead(), 1);
    assert_eq!(counters.published(), 99);

    let later = harness.push_all(vec![json!({"topic": "panic.jobs", "body": "later"})]).await;
    let delivered = harness.reaches(&later[0], JobState::Finished, Duration::from_secs(10)).await;
    assert!(delivered, "the forwarder goes on after a sink panicked");
}
