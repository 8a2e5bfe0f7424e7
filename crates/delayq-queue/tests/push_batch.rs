//! `DelayQueue::push_batch` over a real store (SQLite in a temp dir) and the
//! memory scheduler: a batch is written and scheduled slice by slice, several
//! slices in flight at once, and every job's answer is its own. When the
//! scheduler fails partway, the jobs it took are answered as pushed and
//! every other job as unavailable; nothing answered as pushed is missing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::intercept::{Intercept, Intercepted};
use delayq_common::{Job, JobId, PushRequest, Snowflake, Topic};
use delayq_queue::{DelayQueue, MemoryScheduler, QueueError, QueueResult, QueueSettings, Scheduler};
use delayq_store::{JobStore, SqliteStore};

mod common;

const JOBS: usize = 1000;

/// Every `schedule_batch` call from the `fail_from`-th on (counting from 0)
/// fails as a backend that went away.
struct FailingFrom {
    calls: AtomicUsize,
    fail_from: usize,
}

#[async_trait]
impl Intercept for FailingFrom {
    async fn schedule_batch(&self, inner: &dyn Scheduler, jobs: &[Job]) -> QueueResult<Vec<QueueResult<()>>> {
        if self.calls.fetch_add(1, Ordering::SeqCst) >= self.fail_from {
            return Err(QueueError::Unavailable { backend: "memory", source: "the scheduler went away".into() });
        }
        inner.schedule_batch(jobs).await
    }
}

struct Setup {
    queue: DelayQueue,
    scheduler: Arc<Intercepted<FailingFrom>>,
    store: Arc<SqliteStore>,
    _dir: tempfile::TempDir,
}

async fn setup(fail_from: usize) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open_in(dir.path(), "batch-test".to_owned()).await.expect("sqlite store"));
    let failing = FailingFrom { calls: AtomicUsize::new(0), fail_from };
    let scheduler = Arc::new(Intercepted::new(Arc::new(MemoryScheduler::new()), failing));
    let queue = DelayQueue::new(
        Arc::clone(&scheduler) as Arc<dyn Scheduler>,
        Arc::clone(&store) as Arc<dyn JobStore>,
        Snowflake::new(3),
        QueueSettings::default(),
    );
    Setup { queue, scheduler, store, _dir: dir }
}

fn request(index: usize, id: Option<&JobId>) -> Result<PushRequest, delayq_common::InvalidField> {
    let topic = Topic::parse("batch.test").expect("topic");
    Ok(common::push_request(&topic, id, format!("job {index}"), Duration::from_secs(60)))
}

/// The ids answered as pushed; panics on any other kind of refusal than `allowed`.
fn pushed_ids(outcomes: &[QueueResult<delayq_queue::Pushed>], allowed: fn(&QueueError) -> bool) -> Vec<JobId> {
    outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Ok(pushed) => Some(pushed.id.clone()),
            Err(error) if allowed(error) => None,
            Err(error) => panic!("unexpected refusal: {error}"),
        })
        .collect()
}

#[tokio::test]
async fn every_job_of_a_batch_is_stored_and_scheduled_and_a_refusal_is_its_own() {
    let setup = setup(usize::MAX).await;
    // A live job holds the id that job 500 of the batch asks for.
    let taken = setup.queue.push(request(0, None).expect("request")).await.expect("first push").id;
    let requests: Vec<_> =
        (0..JOBS).map(|index| request(index, if index == 500 { Some(&taken) } else { None })).collect();
    let outcomes = setup.queue.push_batch(requests).await.expect("the batch");
    assert_eq!(outcomes.len(), JOBS);
    assert!(outcomes[500].is_err(), "the taken id is refused: {:?}", outcomes[500]);
    let pushed = pushed_ids(&outcomes, |error| !matches!(error, QueueError::Unavailable { .. }));
    assert_eq!(pushed.len(), JOBS - 1);
    for id in &pushed {
        assert!(setup.scheduler.get(id).await.expect("get").is_some(), "{id} is scheduled");
        assert!(setup.store.get(id).await.expect("store get").is_some(), "{id} is stored");
    }
    // The answers are in the order of the requests: each job's body is its index.
    for (index, outcome) in outcomes.iter().enumerate() {
        if let Ok(pushed) = outcome {
            let job = setup.store.get(&pushed.id).await.expect("store get").expect("stored");
            assert_eq!(job.body, format!("job {index}"));
        }
    }
}

#[tokio::test]
async fn a_scheduler_failing_partway_leaves_the_jobs_it_took_pushed_and_the_rest_unavailable() {
    // The first slice (256 jobs) is scheduled; every later call fails.
    let setup = setup(1).await;
    let requests: Vec<_> = (0..JOBS).map(|index| request(index, None)).collect();
    let outcomes = setup.queue.push_batch(requests).await.expect("some jobs were pushed");
    let pushed = pushed_ids(&outcomes, |error| matches!(error, QueueError::Unavailable { .. }));
    assert_eq!(pushed.len(), 256, "exactly the first slice is pushed");
    assert!(outcomes[..256].iter().all(Result::is_ok), "the first slice is the one pushed");
    for id in &pushed {
        assert!(setup.scheduler.get(id).await.expect("get").is_some(), "{id} is scheduled");
        assert!(setup.store.get(id).await.expect("store get").is_some(), "{id} is stored");
    }
    let stats = setup.scheduler.stats().await.expect("stats");
    let scheduled: u64 = stats.iter().map(|topic| topic.delay + topic.ready + topic.reserved).sum();
    assert_eq!(scheduled, 256, "no job answered as unavailable is scheduled");
}

#[tokio::test]
async fn a_scheduler_failing_at_once_fails_the_whole_batch() {
    let setup = setup(0).await;
    let requests: Vec<_> = (0..JOBS).map(|index| request(index, None)).collect();
    match setup.queue.push_batch(requests).await {
        Err(QueueError::Unavailable { .. }) => {}
        Err(error) => panic!("expected unavailable, got {error}"),
        Ok(outcomes) => panic!("expected a failure, got {} outcomes", outcomes.len()),
    }
}
