//! The horizon: jobs due beyond it wait in the store alone, the loader brings
//! them into the scheduler ahead of their due time, and every operation works
//! on them meanwhile. Each check pushes, runs the timer, the loader and a
//! consumer that finishes what it pops, and asserts that every job arrives
//! exactly once and never early, whatever crosses the horizon beside it:
//! deletes, replaces in both directions, a leader change in the middle of a
//! load, the scheduler emptied in the middle of a load.
//!
//! Runs on the memory scheduler with SQLite, and, when the services are set,
//! with MariaDB, on Redis (with either store) and on Redis Cluster.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::intercept::{Intercept, Intercepted};
use delayq_common::{JobId, JobState, PushRequest, Snowflake, Timestamp, Topic};
use delayq_queue::{
    run_loader, run_recovery, run_timer, DelayQueue, MemoryScheduler, QueueError, QueueResult, QueueSettings,
    RecoveryOptions, RestoreFence, Scheduler,
};
use delayq_store::JobStore;
use tokio_util::sync::CancellationToken;

mod common;

use common::deployments::{on_every_deployment, Deployment};

/// The horizon of every check: short, so jobs cross it within seconds.
const HORIZON: Duration = Duration::from_millis(1_500);
/// Small pages, so a load takes several.
const PAGE: usize = 20;
/// How long a check waits for its jobs at most.
const PATIENCE: Duration = Duration::from_secs(60);

fn settings() -> QueueSettings {
    QueueSettings { horizon: Some(HORIZON), restore_batch: PAGE, ..QueueSettings::default() }
}

fn queue_over(scheduler: Arc<dyn Scheduler>, store: Arc<dyn JobStore>) -> Arc<DelayQueue> {
    Arc::new(DelayQueue::new(scheduler, store, Snowflake::new(21), settings()))
}

fn unique_topic(stem: &str) -> Topic {
    common::topic(&format!("{stem}.{}", common::unique_prefix().replace([':', '-'], "_")))
}

fn id(value: &str) -> JobId {
    JobId::parse(value).expect("valid id")
}

fn push(topic: &Topic, id: &JobId, body: &str, delay: Duration) -> PushRequest {
    PushRequest { ttr: Some(Duration::from_secs(2)), ..common::push_request(topic, Some(id), body.to_owned(), delay) }
}

/// Per job, each delivery's body, due time and arrival.
type Deliveries = HashMap<JobId, Vec<(String, Timestamp, Timestamp)>>;

/// What a consumer received.
type Received = Arc<Mutex<Deliveries>>;

/// The leader's work and a consumer that finishes each job it pops before the next pop.
struct Running {
    cancel: CancellationToken,
    received: Received,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Runs the timer and the loader of `leader` (and recovery, when asked),
    /// and a consumer of `topic` on `consumer`.
    fn start(leader: &Arc<DelayQueue>, consumer: &Arc<DelayQueue>, topic: &Topic, recovery: bool) -> Running {
        let cancel = CancellationToken::new();
        let received: Received = Arc::default();
        let mut tasks = vec![
            tokio::spawn(run_timer(Arc::clone(leader), cancel.clone())),
            tokio::spawn(run_loader(Arc::clone(leader), cancel.clone(), || true)),
            tokio::spawn(consume(Arc::clone(consumer), topic.clone(), Arc::clone(&received), cancel.clone())),
        ];
        if recovery {
            let options =
                RecoveryOptions { check_every: Duration::from_millis(100), reconcile_every: Duration::from_secs(3600) };
            tasks.push(tokio::spawn(run_recovery(Arc::clone(leader), cancel.clone(), || true, options)));
        }
        Running { cancel, received, tasks }
    }

    /// Waits until every id of `expected` arrived (or the patience runs out),
    /// then a little longer for duplicates, and stops.
    async fn stop_when_received(self, expected: &[JobId]) -> Deliveries {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while tokio::time::Instant::now() < deadline {
            let done = {
                let received = self.received.lock().expect("lock");
                expected.iter().all(|id| received.contains_key(id))
            };
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Time for a duplicate to show: past a ttr and a loader step.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        self.cancel.cancel();
        for task in self.tasks {
            task.await.expect("task");
        }
        let received = self.received.lock().expect("lock").clone();
        received
    }

    /// Stops once every job of `expected` arrived, and asserts each arrived once, never early.
    async fn expect_each_once(self, name: &str, expected: &[(JobId, String, Timestamp)]) -> Deliveries {
        let ids: Vec<JobId> = expected.iter().map(|(id, _, _)| id.clone()).collect();
        let received = self.stop_when_received(&ids).await;
        assert_each_once(name, &received, expected);
        received
    }
}

async fn consume(queue: Arc<DelayQueue>, topic: Topic, received: Received, cancel: CancellationToken) {
    while !cancel.is_cancelled() {
        let jobs = match queue.pop(&topic, 10, Duration::from_millis(100)).await {
            Ok(jobs) => jobs,
            Err(_) => {
                // The scheduler may be down for a moment (emptied, restoring).
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let now = Timestamp::now();
        for job in jobs {
            received.lock().expect("lock").entry(job.id.clone()).or_default().push((job.body.clone(), job.run_at, now));
            let _ = queue.finish(&job.id, Some(job.attempt), None).await;
        }
    }
}

/// Asserts each id of `expected` arrived exactly once, never before `due`, with `body`.
fn assert_each_once(name: &str, received: &Deliveries, expected: &[(JobId, String, Timestamp)]) {
    for (job_id, body, due) in expected {
        let deliveries = received.get(job_id).map_or(&[][..], Vec::as_slice);
        assert_eq!(deliveries.len(), 1, "{name}: job {job_id} arrived {} times", deliveries.len());
        let (got_body, run_at, arrived) = &deliveries[0];
        assert_eq!(got_body, body, "{name}: job {job_id} arrived with the wrong body");
        assert_eq!(run_at, due, "{name}: job {job_id} carried the wrong due time");
        assert!(arrived >= due, "{name}: job {job_id} arrived {} ms early", due.since(*arrived).as_millis());
    }
}

/// A queue over the deployment with its horizon's marks set, and a topic and
/// a job id stem of its own.
async fn open_queue(deployment: &Deployment, stem: &str) -> (Arc<DelayQueue>, Topic, String) {
    let queue = queue_over(Arc::clone(&deployment.scheduler), Arc::clone(&deployment.store));
    open_horizon(&queue).await;
    (queue, unique_topic(stem), delayq_testkit::unique_name(stem))
}

/// Sets the horizon's marks, as the loader's first step does.
async fn open_horizon(queue: &DelayQueue) {
    queue.load_horizon(Timestamp::now().plus(HORIZON)).await.expect("first load");
}

/// Pushes `count` jobs due from `from` to `from + spread`, alternately one at
/// a time and in batches; returns each id, body and due time.
async fn push_spread(
    queue: &DelayQueue,
    topic: &Topic,
    stem: &str,
    count: usize,
    from: Duration,
    spread: Duration,
) -> Vec<(JobId, String, Timestamp)> {
    let mut expected = Vec::with_capacity(count);
    let mut batch = Vec::new();
    for index in 0..count {
        let job_id = id(&format!("{stem}-{index}"));
        let delay = from + spread.mul_f64(index as f64 / count as f64);
        let body = format!("body-{index}");
        let request = push(topic, &job_id, &body, delay);
        if index % 2 == 0 {
            let pushed = queue.push(request).await.expect("push");
            expected.push((job_id, body, pushed.run_at));
        } else {
            batch.push((job_id, body, request));
        }
    }
    let (ids, requests): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|(id, body, request)| ((id, body), Ok(request))).unzip();
    let outcomes = queue.push_batch(requests).await.expect("batch push");
    for ((job_id, body), outcome) in ids.into_iter().zip(outcomes) {
        expected.push((job_id, body, outcome.expect("pushed in the batch").run_at));
    }
    expected
}

/// Where jobs are pushed so that they start beyond the horizon: the horizon
/// rounded up to the end of its due-time bucket, and a bucket more.
fn beyond_the_horizon() -> Duration {
    HORIZON + Duration::from_millis(2 * delayq_store::DUE_BUCKET_MS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_beyond_the_horizon_wait_in_the_store_and_arrive_on_time() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let (queue, topic, stem) = open_queue(&deployment, "cold").await;
        let spread = beyond_the_horizon() * 2;
        let expected = push_spread(&queue, &topic, &stem, 200, Duration::ZERO, spread).await;

        let marks = queue.scheduler().horizon().await.expect("marks").expect("a horizon");
        let cold: Vec<&JobId> = expected.iter().filter(|(_, _, due)| *due > marks.admit).map(|(id, _, _)| id).collect();
        assert!(cold.len() > 20, "{name}: {} jobs due beyond the horizon", cold.len());
        for job_id in &cold {
            assert_eq!(queue.scheduler().get(job_id).await.expect("get"), None, "{name}: {job_id} stays in the store");
            let details = queue.get(job_id).await.expect("a cold job reads like any other");
            assert_eq!(details.job.state, JobState::Delay, "{name}");
        }
        let stats = queue.stats().await.expect("stats");
        let horizon = stats.horizon.expect("the horizon shows in the stats");
        assert!(horizon.cold >= cold.len() as u64, "{name}: {} cold, {} expected", horizon.cold, cold.len());
        let ours = stats.live.iter().filter(|live| live.topic == topic);
        assert_eq!(ours.map(|live| live.delay + live.ready).sum::<u64>(), 200, "{name}: cold jobs count as delayed");

        let running = Running::start(&queue, &queue, &topic, false);
        running.expect_each_once(name, &expected).await;
        queue.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_and_replaces_hold_while_jobs_cross_the_horizon() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let (queue, topic, stem) = open_queue(&deployment, "cross").await;
        let beyond = beyond_the_horizon();
        let pushed = push_spread(&queue, &topic, &stem, 90, beyond, Duration::from_secs(4)).await;
        let running = Running::start(&queue, &queue, &topic, false);
        let mut expected = Vec::new();
        let mut deleted = Vec::new();
        for (index, (job_id, body, due)) in pushed.into_iter().enumerate() {
            match index % 3 {
                0 => {
                    queue.delete(&job_id).await.unwrap_or_else(|error| panic!("{name}: delete {job_id}: {error}"));
                    deleted.push(job_id);
                }
                1 => {
                    // Nearer (from the store into the scheduler) or further (out past the horizon).
                    let delay = if index % 2 == 0 { Duration::from_millis(300) } else { beyond * 2 };
                    let mut again = push(&topic, &job_id, "replaced", delay);
                    again.replace = true;
                    let replaced =
                        queue.push(again).await.unwrap_or_else(|error| panic!("{name}: replace {job_id}: {error}"));
                    expected.push((job_id, "replaced".to_owned(), replaced.run_at));
                }
                _ => expected.push((job_id, body, due)),
            }
            // Spread over the time the loader crosses the first of them.
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        let received = running.expect_each_once(name, &expected).await;
        for job_id in deleted {
            assert!(!received.contains_key(&job_id), "{name}: deleted job {job_id} arrived");
        }
        queue.close().await;
    })
    .await;
}

/// Fails every restore write after the first `allowed`.
struct FailingLoads {
    allowed: usize,
    calls: AtomicUsize,
}

#[async_trait]
impl Intercept for FailingLoads {
    async fn restore_batch(
        &self,
        inner: &dyn Scheduler,
        jobs: &[delayq_common::Job],
        fence: &RestoreFence,
    ) -> QueueResult<Vec<bool>> {
        if self.calls.fetch_add(1, Ordering::SeqCst) >= self.allowed {
            return Err(QueueError::Unavailable { backend: "test", source: "the leader is gone".into() });
        }
        inner.restore_batch(jobs, fence).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_continues_a_load_cut_short() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let failing = Intercepted::new(
            Arc::clone(&deployment.scheduler),
            FailingLoads { allowed: 2, calls: AtomicUsize::new(0) },
        );
        let old_leader = queue_over(Arc::new(failing), Arc::clone(&deployment.store));
        let new_leader = queue_over(Arc::clone(&deployment.scheduler), Arc::clone(&deployment.store));
        let topic = unique_topic("leader");
        open_horizon(&old_leader).await;
        let stem = delayq_testkit::unique_name("leader");
        let beyond = beyond_the_horizon();
        let expected = push_spread(&old_leader, &topic, &stem, 150, beyond, Duration::from_secs(2)).await;
        let before = old_leader.scheduler().horizon().await.expect("marks").expect("a horizon");

        // The old leader's load of every one of them stops after two pages.
        let until = Timestamp::now().plus(beyond * 2);
        assert!(old_leader.load_horizon(until).await.is_err(), "{name}: the load was cut short");
        let after = new_leader.scheduler().horizon().await.expect("marks").expect("a horizon");
        assert!(after.admit >= until, "{name}: admission moved before the load");
        assert_eq!(after.loaded, before.loaded, "{name}: a load cut short leaves the loaded mark");

        let running = Running::start(&new_leader, &new_leader, &topic, false);
        running.expect_each_once(name, &expected).await;
        new_leader.close().await;
    })
    .await;
}

/// Empties the scheduler's keys (a Redis restart without persistence, for
/// this prefix alone) just before one restore write.
struct EmptiedMidLoad {
    url: String,
    prefix: String,
    at_call: usize,
    calls: AtomicUsize,
}

impl EmptiedMidLoad {
    async fn empty(&self) {
        common::deployments::empty_redis(&self.url, &self.prefix).await;
    }
}

#[async_trait]
impl Intercept for EmptiedMidLoad {
    async fn restore_batch(
        &self,
        inner: &dyn Scheduler,
        jobs: &[delayq_common::Job],
        fence: &RestoreFence,
    ) -> QueueResult<Vec<bool>> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == self.at_call {
            self.empty().await;
        }
        inner.restore_batch(jobs, fence).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_emptied_in_the_middle_of_a_load_is_filled_again() {
    on_every_deployment(|deployment| async move {
        let Some((url, prefix)) = deployment.redis.clone() else { return };
        let name = &deployment.name;
        deployment.scheduler.check_intact().await.expect("first check marks the shards");
        let emptying = EmptiedMidLoad { url, prefix, at_call: 1, calls: AtomicUsize::new(0) };
        let scheduler = Arc::new(Intercepted::new(Arc::clone(&deployment.scheduler), emptying));
        let queue = queue_over(Arc::clone(&scheduler) as Arc<dyn Scheduler>, Arc::clone(&deployment.store));
        let topic = unique_topic("emptied");
        open_horizon(&queue).await;
        let stem = delayq_testkit::unique_name("emptied");
        let expected = push_spread(&queue, &topic, &stem, 150, beyond_the_horizon(), Duration::from_secs(2)).await;
        let running = Running::start(&queue, &queue, &topic, true);
        running.expect_each_once(name, &expected).await;
        assert!(scheduler.calls.load(Ordering::SeqCst) > 1, "{name}: Redis was emptied in the middle of a load");
        queue.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_brings_back_the_window_only() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let (queue, topic, stem) = open_queue(&deployment, "window").await;
        push_spread(&queue, &topic, &stem, 40, Duration::ZERO, Duration::from_millis(500)).await;
        let far = format!("{stem}-far");
        push_spread(&queue, &topic, &far, 100, Duration::from_secs(3600), Duration::from_secs(60)).await;

        // A scheduler that starts empty: a restarted embedded server, a new Redis.
        let empty: Arc<dyn Scheduler> = match &deployment.redis {
            Some((url, _)) => Arc::new(common::connect(url, &common::unique_prefix()).await),
            None if deployment.name.starts_with("memory") => Arc::new(MemoryScheduler::new()),
            None => return,
        };
        let restarted = queue_over(Arc::clone(&empty), Arc::clone(&deployment.store));
        restarted.restore(false).await.expect("restore");
        let live = empty.stats().await.expect("stats");
        let held: u64 =
            live.iter().filter(|live| live.topic == topic).map(|live| live.delay + live.ready + live.reserved).sum();
        assert_eq!(held, 40, "{name}: the window is restored, the far jobs stay in the store");
        let marks = empty.horizon().await.expect("marks").expect("a horizon after the restore");
        assert!(marks.loaded.is_some(), "{name}: the restore set the loaded mark");
        let horizon = restarted.stats().await.expect("stats").horizon.expect("horizon stats");
        assert!(horizon.cold >= 100, "{name}: {} cold", horizon.cold);
        restarted.close().await;
    })
    .await;
}

/// A job pushed days ahead is indexed in its coarse bucket, ahead of its due
/// time: the loader brings it once it reaches that bucket's start, not before,
/// and the scheduler then holds it until it is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pushed_days_ahead_is_loaded_from_its_coarse_bucket() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let (queue, topic, stem) = open_queue(&deployment, "days").await;
        let far = id(&format!("{stem}-far"));
        let two_days = Duration::from_millis(2 * delayq_store::FAR_AHEAD_MS);
        queue.push(push(&topic, &far, "far", two_days)).await.expect("push");
        let stored = deployment.store.get(&far).await.expect("get").expect("stored");
        let bucket = delayq_store::job_bucket(stored.run_at, stored.updated_at);
        let coarse = delayq_store::due_bucket(stored.run_at) / delayq_store::COARSE_BUCKETS;
        assert_eq!(bucket, coarse * delayq_store::COARSE_BUCKETS, "{name}: at its coarse bucket's start");
        let start = Timestamp::from_millis(bucket * delayq_store::DUE_BUCKET_MS);
        let before = Timestamp::from_millis(bucket * delayq_store::DUE_BUCKET_MS - 1);
        queue.load_horizon(before).await.expect("load");
        assert!(deployment.scheduler.get(&far).await.expect("get").is_none(), "{name}: not loaded before its bucket");
        assert_eq!(queue.load_horizon(start).await.expect("load"), 1, "{name}: loaded at its bucket's start");
        let held = deployment.scheduler.get(&far).await.expect("get").expect("held");
        assert_eq!((held.state, held.run_at), (JobState::Delay, stored.run_at), "{name}: held until it is due");
        queue.delete(&far).await.expect("delete");
        queue.close().await;
    })
    .await;
}
