//! The harness of the forwarder tests: a real `DelayQueue` (memory scheduler,
//! SQLite store in a temp dir, timer running) with a forwarder over one route.

#![allow(dead_code, unused_imports, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{JobId, JobState, Limits, PushRequest, Snowflake, TimeUnit, Timestamp};
use delayq_forward::{run_forwarder, Route, RouteTable, Sink, TopicPattern};
use delayq_queue::{run_timer, DelayQueue, MemoryScheduler, QueueSettings};
use delayq_store::SqliteStore;
use delayq_testkit::eventually;
use serde_json::Value;
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One queue with its timer and a forwarder; both stop when it is dropped.
pub struct Harness {
    pub queue: Arc<DelayQueue>,
    pub routes: Arc<RouteTable>,
    cancel: CancellationToken,
    forwarder: Option<JoinHandle<()>>,
    _dir: TempDir,
}

impl Harness {
    /// Starts a queue and a forwarder with one route taking `patterns` to `sink`.
    pub async fn start(patterns: &[&str], sink: Arc<dyn Sink>, adjust: impl FnOnce(&mut Route)) -> Harness {
        let patterns = patterns.iter().map(|pattern| TopicPattern::parse(pattern).unwrap()).collect();
        let mut route = Route::new(patterns, sink, "test");
        adjust(&mut route);
        Harness::with_routes(RouteTable::new(vec![route])).await
    }

    pub async fn with_routes(routes: RouteTable) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path(), "forward-test".to_owned()).await.unwrap();
        let queue = Arc::new(DelayQueue::new(
            Arc::new(MemoryScheduler::new()),
            Arc::new(store),
            Snowflake::new(1),
            QueueSettings::default(),
        ));
        let routes = Arc::new(routes);
        let cancel = CancellationToken::new();
        tokio::spawn(run_timer(queue.clone(), cancel.clone()));
        let forwarder = tokio::spawn(run_forwarder(queue.clone(), routes.clone(), cancel.clone()));
        Harness { queue, routes, cancel, forwarder: Some(forwarder), _dir: dir }
    }

    /// Returns the one route's counters.
    pub fn route(&self) -> &Route {
        &self.routes.routes()[0]
    }

    /// Pushes jobs given as JSON objects, in batches of 1000; returns their ids.
    pub async fn push_all(&self, jobs: Vec<Value>) -> Vec<JobId> {
        let mut ids = Vec::with_capacity(jobs.len());
        for chunk in jobs.chunks(1000) {
            let now = Timestamp::now();
            let requests = chunk
                .iter()
                .map(|job| PushRequest::from_json(job, TimeUnit::Millis, &Limits::default(), now))
                .collect();
            for outcome in self.queue.push_batch(requests).await.unwrap() {
                ids.push(outcome.unwrap().id);
            }
        }
        ids
    }

    /// Returns the job's current state.
    pub async fn state(&self, id: &JobId) -> JobState {
        self.queue.get(id).await.unwrap().job.state
    }

    /// Returns whether job `id` is in `state` within `limit`.
    pub async fn reaches(&self, id: &JobId, state: JobState, limit: Duration) -> bool {
        eventually(limit, || async { self.state(id).await == state }).await
    }

    /// Returns whether every job of `ids` is in `state` within `limit`.
    pub async fn all_reach(&self, ids: &[JobId], state: JobState, limit: Duration) -> bool {
        eventually(limit, || async {
            for id in ids {
                if self.state(id).await != state {
                    return false;
                }
            }
            true
        })
        .await
    }

    /// Returns whether the queue holds no live job (every one pushed has
    /// ended) within `limit`.
    pub async fn drains(&self, limit: Duration) -> bool {
        eventually(limit, || async {
            let stats = self.queue.stats().await.unwrap();
            stats.live.iter().all(|topic| topic.delay + topic.ready + topic.reserved == 0)
        })
        .await
    }

    /// Stops the forwarder and waits until its batches have settled.
    pub async fn stop(&mut self) {
        self.cancel.cancel();
        if let Some(forwarder) = self.forwarder.take() {
            tokio::time::timeout(Duration::from_secs(30), forwarder).await.unwrap().unwrap();
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
