//! `DelayQueue` restore over a real store (SQLite in a temp dir): idempotent,
//! safe while the timer and consumers run, never bringing back an ended job;
//! and the finish or nack of a job the scheduler lost is answered from the store.
//! Runs on the memory scheduler, and on Redis when `DELAYQ_TEST_REDIS_URL` is set.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{JobId, JobState, PushRequest, Snowflake, Timestamp, Topic};
use delayq_queue::{run_timer, DelayQueue, MemoryScheduler, QueueError, QueueSettings, Scheduler};
use delayq_store::SqliteStore;
use tokio_util::sync::CancellationToken;

mod common;

const JOBS: usize = 300;

async fn redis(prefix: &str) -> Option<Arc<dyn Scheduler>> {
    let url = delayq_testkit::service("DELAYQ_TEST_REDIS_URL")?;
    Some(Arc::new(common::connect(&url, prefix).await))
}

async fn queue_over(scheduler: Arc<dyn Scheduler>, dir: &tempfile::TempDir) -> Arc<DelayQueue> {
    // Small pages, so a restore walks many of them.
    queue_with(scheduler, dir, QueueSettings { restore_batch: 37, ..QueueSettings::default() }).await
}

async fn queue_with(
    scheduler: Arc<dyn Scheduler>,
    dir: &tempfile::TempDir,
    settings: QueueSettings,
) -> Arc<DelayQueue> {
    let store = SqliteStore::open_in(dir.path(), "restore-test".to_owned()).await.expect("sqlite store");
    Arc::new(DelayQueue::new(scheduler, Arc::new(store), Snowflake::new(7), settings))
}

fn push(topic: &Topic, id: Option<&str>, delay: Duration) -> PushRequest {
    let id = id.map(|id| JobId::parse(id).expect("valid id"));
    PushRequest {
        ttr: Some(Duration::from_secs(30)),
        ..common::push_request(topic, id.as_ref(), "payload".to_owned(), delay)
    }
}

/// Restores run over and over while the timer promotes and a consumer pops and
/// finishes: every job is delivered exactly once, and nothing ended comes back.
async fn restore_while_consuming(queue: Arc<DelayQueue>) {
    let topic = Topic::parse(delayq_testkit::unique_name("restore.busy")).expect("topic");
    let cancel = CancellationToken::new();
    let timer = tokio::spawn(run_timer(Arc::clone(&queue), cancel.clone()));
    for index in 0..JOBS {
        let delay = Duration::from_millis((index % 10) as u64 * 50);
        queue.push(push(&topic, None, delay)).await.expect("push");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let restorer = {
        let (queue, stop) = (Arc::clone(&queue), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut rounds = 0;
            while !stop.load(Ordering::SeqCst) {
                queue.restore(false).await.expect("restore");
                rounds += 1;
            }
            rounds
        })
    };
    let mut deliveries: HashMap<JobId, u32> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while deliveries.len() < JOBS {
        assert!(tokio::time::Instant::now() < deadline, "only {} of {JOBS} delivered", deliveries.len());
        let jobs = queue.pop(&topic, 7, Duration::from_millis(100)).await.expect("pop");
        for job in jobs {
            *deliveries.entry(job.id.clone()).or_default() += 1;
            queue.finish(&job.id, None, None).await.expect("finish");
        }
    }
    // Restores keep running a little longer: a finished job must not come back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late = queue.pop(&topic, 100, Duration::from_millis(300)).await.expect("pop");
    stop.store(true, Ordering::SeqCst);
    let rounds = restorer.await.expect("restorer");
    assert!(rounds > 2, "restore ran during the deliveries ({rounds} rounds)");
    assert!(late.is_empty(), "ended jobs came back: {late:?}");
    let twice: Vec<_> = deliveries.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert_eq!(queue.reconcile().await.expect("reconcile"), 0, "nothing live is missing");

    // A deleted job stays deleted.
    let doomed = queue
        .push(push(&topic, Some(&delayq_testkit::unique_name("doomed")), Duration::from_secs(60)))
        .await
        .expect("push");
    queue.delete(&doomed.id).await.expect("delete");
    queue.restore(false).await.expect("restore");
    assert_eq!(queue.scheduler().get(&doomed.id).await.expect("get"), None, "restore brought a deleted job back");
    let again = queue.restore_job(&doomed.id).await;
    assert!(matches!(again, Err(QueueError::WrongState { state: JobState::Deleted, .. })), "{again:?}");
    cancel.cancel();
    timer.await.expect("timer");
}

/// The scheduler loses a reserved job: its consumer's finish is answered from
/// the store, and a later restore does not bring it back.
async fn finish_after_the_scheduler_lost_the_job(queue: Arc<DelayQueue>) {
    let topic = Topic::parse(delayq_testkit::unique_name("restore.lost")).expect("topic");
    let pushed = queue.push(push(&topic, None, Duration::ZERO)).await.expect("push");
    queue.promote_due(Timestamp::now()).await.expect("promote");
    let popped = queue.pop(&topic, 1, Duration::from_secs(2)).await.expect("pop");
    assert_eq!(popped.iter().map(|job| &job.id).collect::<Vec<_>>(), [&pushed.id]);
    // The scheduler forgets it (as an emptied Redis would).
    queue.scheduler().delete(&pushed.id).await.expect("forget");
    let finished = queue.finish(&pushed.id, None, Some("done".to_owned())).await.expect("finish from the store");
    assert_eq!(finished.state, JobState::Finished);
    queue.restore(false).await.expect("restore");
    assert_eq!(queue.scheduler().get(&pushed.id).await.expect("get"), None, "a finished job is not restored");

    // A nack of a lost job puts it back for its retry.
    let second = queue.push(push(&topic, None, Duration::ZERO)).await.expect("push");
    queue.promote_due(Timestamp::now()).await.expect("promote");
    let popped = queue.pop(&topic, 1, Duration::from_secs(2)).await.expect("pop");
    assert_eq!(popped.iter().map(|job| &job.id).collect::<Vec<_>>(), [&second.id]);
    queue.scheduler().delete(&second.id).await.expect("forget");
    let nacked = queue.nack(&second.id, None, Some(Duration::ZERO)).await.expect("nack from the store");
    assert_eq!((nacked.state, nacked.attempt), (JobState::Ready, 2));
    let retried = queue.pop(&topic, 1, Duration::from_secs(2)).await.expect("pop the retry");
    assert_eq!(retried.iter().map(|job| (&job.id, job.attempt)).collect::<Vec<_>>(), [(&second.id, 2)]);
}

/// The scheduler loses every job, some due and some not: a restore with the
/// default page size puts each back, both the due jobs (read and written in
/// the exclusive section) and the future ones (on a shared scheduler, written
/// a slice at a time).
async fn restore_brings_back_due_and_future_jobs(scheduler: Arc<dyn Scheduler>, dir: &tempfile::TempDir) {
    let queue = queue_with(scheduler, dir, QueueSettings::default()).await;
    let topic = Topic::parse(delayq_testkit::unique_name("restore.pages")).expect("topic");
    let mut ids = Vec::new();
    for index in 0..JOBS {
        let delay = if index % 3 == 0 { Duration::from_secs(60) } else { Duration::ZERO };
        ids.push(queue.push(push(&topic, None, delay)).await.expect("push").id);
    }
    for id in &ids {
        queue.scheduler().delete(id).await.expect("forget");
    }
    assert_eq!(queue.restore(false).await.expect("restore"), JOBS as u64);
    for id in &ids {
        assert!(queue.scheduler().get(id).await.expect("get").is_some(), "{id} was not restored");
    }
    queue.promote_due(Timestamp::now()).await.expect("promote");
    let due = queue.pop(&topic, 100, Duration::from_secs(2)).await.expect("pop");
    assert!(!due.is_empty() && due.iter().all(|job| job.run_at <= Timestamp::now()), "{due:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_restore_brings_back_due_and_future_jobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    restore_brings_back_due_and_future_jobs(Arc::new(MemoryScheduler::new()), &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restore_brings_back_due_and_future_jobs() {
    let Some(scheduler) = redis(&delayq_testkit::unique_name("dqtest:pages")).await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    restore_brings_back_due_and_future_jobs(scheduler, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_restore_while_consuming() {
    let dir = tempfile::tempdir().expect("tempdir");
    restore_while_consuming(queue_over(Arc::new(MemoryScheduler::new()), &dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_finish_after_the_scheduler_lost_the_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    finish_after_the_scheduler_lost_the_job(queue_over(Arc::new(MemoryScheduler::new()), &dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restore_while_consuming() {
    let Some(scheduler) = redis(&delayq_testkit::unique_name("dqtest:restore")).await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    restore_while_consuming(queue_over(scheduler, &dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_finish_after_the_scheduler_lost_the_job() {
    let Some(scheduler) = redis(&delayq_testkit::unique_name("dqtest:lost")).await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    finish_after_the_scheduler_lost_the_job(queue_over(scheduler, &dir).await).await;
}
