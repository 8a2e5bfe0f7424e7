//! The promises a client relies on when requests race or a backend write
//! fails: an ended job is a conflict naming its state, never "not found"; a
//! consumer that names its delivery cannot act on a later one; every
//! acknowledged push is delivered, whatever deletes, replaces or clears run
//! beside it; and waiting consumers are capped.
//!
//! Each check runs embedded (memory scheduler, SQLite store) and distributed
//! (Redis scheduler, MySQL store) when `DELAYQ_TEST_REDIS_URL` and
//! `DELAYQ_TEST_MYSQL_URL` are set.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::intercept::{Intercept, Intercepted};
use delayq_common::{Job, JobId, JobState, PushRequest, Snowflake, Timestamp, Topic};
use delayq_queue::{run_timer, DelayQueue, MemoryScheduler, QueueError, QueueResult, QueueSettings, Scheduler};
use delayq_store::{JobStore, MysqlStore, SqliteStore};
use tokio_util::sync::CancellationToken;

mod common;

/// A deployment: its name, its backends, and the directory its SQLite file lives in.
type Deployment = (&'static str, Arc<dyn Scheduler>, Arc<dyn JobStore>, Option<tempfile::TempDir>);

/// A push the test starts from inside a clear.
type ClearHook = Box<dyn FnOnce() -> tokio::task::JoinHandle<()> + Send>;
type PopHook = Box<dyn FnOnce() -> tokio::task::JoinHandle<Vec<Job>> + Send>;

/// The two deployments: embedded, and Redis + MySQL when both are configured.
async fn deployments() -> Vec<Deployment> {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = SqliteStore::open_in(dir.path(), "trust".to_owned()).await.expect("sqlite store");
    let mut all: Vec<Deployment> = vec![("embedded", Arc::new(MemoryScheduler::new()), Arc::new(sqlite), Some(dir))];
    let redis = delayq_testkit::service("DELAYQ_TEST_REDIS_URL");
    let mysql = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL");
    if let (Some(redis), Some(mysql)) = (redis, mysql) {
        let scheduler = common::connect(&redis, &common::unique_prefix()).await;
        let store = MysqlStore::open_scratch(&mysql, "trust".to_owned()).await.expect("mysql store");
        all.push(("distributed", Arc::new(scheduler), Arc::new(store), None));
    }
    all
}

fn queue(scheduler: Arc<dyn Scheduler>, store: Arc<dyn JobStore>, settings: QueueSettings) -> Arc<DelayQueue> {
    Arc::new(DelayQueue::new(scheduler, store, Snowflake::new(11), settings))
}

fn unique_topic(stem: &str) -> Topic {
    common::topic(&format!("{stem}.{}", common::unique_prefix().replace([':', '-'], "_")))
}

fn id(value: &str) -> JobId {
    JobId::parse(value).expect("valid id")
}

fn push(topic: &Topic, id: Option<&JobId>, body: &str) -> PushRequest {
    common::push_request(topic, id, body.to_owned(), Duration::ZERO)
}

fn assert_wrong_state<T: std::fmt::Debug>(what: &str, outcome: QueueResult<T>, expected: JobState) {
    match outcome {
        Err(QueueError::WrongState { state, .. }) => assert_eq!(state, expected, "{what}"),
        other => panic!("{what}: expected a conflict naming {expected}, got {other:?}"),
    }
}

fn assert_stale<T: std::fmt::Debug>(what: &str, outcome: QueueResult<T>, held: u32, current: u32) {
    match outcome {
        Err(QueueError::StaleAttempt { attempt, current: now, .. }) => {
            assert_eq!((attempt, now), (held, current), "{what}")
        }
        other => panic!("{what}: expected a stale-attempt conflict, got {other:?}"),
    }
}

/// Asserts that every job the store calls live is in the scheduler, in the same
/// state, and that the scheduler holds nothing the store calls ended.
async fn assert_backends_agree(name: &str, queue: &DelayQueue, ids: &[JobId]) {
    queue.store().flush().await.expect("flush");
    for job_id in ids {
        let stored = queue.store().get(job_id).await.expect("store get");
        let scheduled = queue.scheduler().get(job_id).await.expect("scheduler get");
        let stored_live = stored.as_ref().is_some_and(|job| job.state.is_live());
        assert_eq!(
            stored_live,
            scheduled.is_some(),
            "{name}: job {job_id} is {:?} in the store but {:?} in the scheduler",
            stored.map(|job| job.state),
            scheduled.map(|job| job.state)
        );
    }
}

#[tokio::test]
async fn an_ended_job_is_a_conflict_naming_its_state() {
    for (name, scheduler, store, _dir) in deployments().await {
        let queue = queue(scheduler, store, QueueSettings::default());
        let topic = unique_topic("ended");
        let finished = queue.push(push(&topic, None, "a")).await.expect("push");
        let popped = queue.pop(&topic, 1, Duration::ZERO).await.expect("pop");
        assert_eq!(popped.len(), 1, "{name}");
        queue.finish(&finished.id, None, None).await.expect("finish");
        assert_wrong_state(
            "finish of a finished job",
            queue.finish(&finished.id, None, None).await,
            JobState::Finished,
        );
        assert_wrong_state("delete of a finished job", queue.delete(&finished.id).await, JobState::Finished);
        assert_wrong_state("nack of a finished job", queue.nack(&finished.id, None, None).await, JobState::Finished);
        assert_wrong_state("touch of a finished job", queue.touch(&finished.id, None).await, JobState::Finished);

        let deleted = queue.push(push(&topic, None, "b")).await.expect("push");
        queue.delete(&deleted.id).await.expect("delete");
        assert_wrong_state("delete of a deleted job", queue.delete(&deleted.id).await, JobState::Deleted);
        assert_wrong_state("finish of a deleted job", queue.finish(&deleted.id, None, None).await, JobState::Deleted);

        let mut once = push(&topic, None, "c");
        once.max_retries = Some(0);
        let dead = queue.push(once).await.expect("push");
        queue.pop(&topic, 1, Duration::ZERO).await.expect("pop");
        let nacked = queue.nack(&dead.id, None, Some(Duration::ZERO)).await.expect("nack");
        assert_eq!(nacked.state, JobState::Dead, "{name}");
        assert_wrong_state("finish of a dead job", queue.finish(&dead.id, None, None).await, JobState::Dead);
        assert_wrong_state("delete of a dead job", queue.delete(&dead.id).await, JobState::Dead);

        let never = id(&format!("never-{}", Timestamp::now().as_millis()));
        assert!(matches!(queue.finish(&never, None, None).await, Err(QueueError::NotFound(_))), "{name}");
        assert!(matches!(queue.delete(&never).await, Err(QueueError::NotFound(_))), "{name}");
        assert!(matches!(queue.touch(&never, None).await, Err(QueueError::NotFound(_))), "{name}");
        queue.close().await;
    }
}

/// Pops `topic` until a job comes, for up to five seconds.
async fn pop_one(queue: &DelayQueue, topic: &Topic) -> Job {
    for _ in 0..50 {
        if let Some(job) = queue.pop(topic, 1, Duration::from_millis(100)).await.expect("pop").pop() {
            return job;
        }
    }
    panic!("no job of {topic} came within five seconds");
}

#[tokio::test]
async fn a_consumer_that_names_its_delivery_cannot_act_on_a_later_one() {
    for (name, scheduler, store, _dir) in deployments().await {
        let queue = queue(scheduler, store, QueueSettings::default());
        let cancel = CancellationToken::new();
        let timer = tokio::spawn(run_timer(Arc::clone(&queue), cancel.clone()));
        let topic = unique_topic("attempt");
        let mut request = push(&topic, None, "work");
        request.ttr = Some(Duration::from_millis(100));
        let pushed = queue.push(request).await.expect("push");
        let first = pop_one(&queue, &topic).await;
        assert_eq!(first.attempt, 1, "{name}");
        // Consumer A's ttr passes; consumer B gets the job again.
        let second = pop_one(&queue, &topic).await;
        assert_eq!((second.id.clone(), second.attempt), (pushed.id.clone(), 2), "{name}");

        assert_stale("A's finish", queue.finish(&pushed.id, Some(1), None).await, 1, 2);
        assert_stale("A's nack", queue.nack(&pushed.id, Some(1), None).await, 1, 2);
        assert_stale("A's touch", queue.touch(&pushed.id, Some(1)).await, 1, 2);
        let stored = queue.get(&pushed.id).await.expect("get");
        assert_eq!((stored.job.state, stored.job.attempt), (JobState::Reserved, 2), "{name}: A changed nothing");

        queue.touch(&pushed.id, Some(2)).await.expect("B's touch");
        queue.finish(&pushed.id, Some(2), Some("done".to_owned())).await.expect("B's finish");
        assert_eq!(queue.get(&pushed.id).await.expect("get").job.state, JobState::Finished, "{name}");
        cancel.cancel();
        timer.await.expect("timer");
        queue.close().await;
    }
}

/// Pushes and deletes the same ids from many tasks at once: whatever the
/// interleaving, a job the store calls live is scheduled, and each one the
/// last successful push left is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletes_and_repushes_of_one_id_set_never_lose_a_push() {
    const IDS: usize = 20;
    const LOOPS: usize = 1000;
    const ROUNDS: usize = 4;
    for (name, scheduler, store, _dir) in deployments().await {
        let queue = queue(scheduler, store, QueueSettings::default());
        let topic = unique_topic("repush");
        let stem = common::unique_prefix().replace(':', "_");
        let ids: Vec<JobId> = (0..IDS).map(|index| id(&format!("{stem}-{index}"))).collect();
        let tasks: Vec<_> = (0..LOOPS)
            .map(|task| {
                let (queue, topic) = (Arc::clone(&queue), topic.clone());
                let job_id = ids[task % IDS].clone();
                tokio::spawn(async move {
                    for round in 0..ROUNDS {
                        if (task + round) % 2 == 0 {
                            let _ = queue.push(push(&topic, Some(&job_id), &format!("{task}-{round}"))).await;
                        } else {
                            let _ = queue.delete(&job_id).await;
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        assert_backends_agree(name, &queue, &ids).await;
        let live = {
            let mut live = 0;
            for job_id in &ids {
                if queue.store().get(job_id).await.expect("get").is_some_and(|job| job.state.is_live()) {
                    live += 1;
                }
            }
            live
        };
        let mut delivered = 0;
        while let Ok(jobs) = queue.pop(&topic, 100, Duration::ZERO).await {
            if jobs.is_empty() {
                break;
            }
            delivered += jobs.len();
        }
        assert_eq!(delivered, live, "{name}: every live job is delivered");
        queue.close().await;
    }
}

/// What makes a scheduler's next `finish`, `delete` or `replace` misbehave as
/// a faulty network or a racing consumer would; everything else goes to the
/// real backend.
#[derive(Default)]
struct Faulty {
    fail_next_removal: std::sync::atomic::AtomicBool,
    /// Starts a consumer's pop just before a replace goes to the backend.
    pop_before_replace: std::sync::Mutex<Option<PopHook>>,
    /// The pop `pop_before_replace` started.
    popped: std::sync::Mutex<Option<tokio::task::JoinHandle<Vec<Job>>>>,
    /// Runs before a clear or batch delete goes to the backend.
    before_clear: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    clear_hook: std::sync::Mutex<Option<ClearHook>>,
}

impl Faulty {
    fn take_removal_failure(&self) -> QueueResult<()> {
        if self.fail_next_removal.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(QueueError::Unavailable { backend: "redis", source: "connection reset".into() });
        }
        Ok(())
    }

    async fn run_clear_hook(&self) {
        let hook = self.clear_hook.lock().expect("hook").take();
        if let Some(hook) = hook {
            let push = hook();
            // Give the push time to finish if nothing holds it back.
            tokio::time::sleep(Duration::from_millis(200)).await;
            *self.before_clear.lock().expect("hook") = Some(push);
        }
    }
}

#[async_trait]
impl Intercept for Faulty {
    async fn replace(&self, inner: &dyn Scheduler, job: &Job) -> QueueResult<Job> {
        let hook = self.pop_before_replace.lock().expect("hook").take();
        if let Some(hook) = hook {
            let pop = hook();
            // The consumer has reserved it; it may still be reading the payload.
            let mut reserved = false;
            for _ in 0..400 {
                reserved = inner.get(&job.id).await?.is_some_and(|held| held.state == JobState::Reserved);
                if reserved {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(reserved, "a consumer pops the job just before the replace");
            *self.popped.lock().expect("hook") = Some(pop);
        }
        inner.replace(job).await
    }
    async fn finish(&self, inner: &dyn Scheduler, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        self.take_removal_failure()?;
        inner.finish(id, attempt).await
    }
    async fn delete(&self, inner: &dyn Scheduler, id: &JobId) -> QueueResult<Job> {
        self.take_removal_failure()?;
        inner.delete(id).await
    }
    async fn delete_batch(&self, inner: &dyn Scheduler, ids: &[JobId]) -> QueueResult<u64> {
        self.run_clear_hook().await;
        inner.delete_batch(ids).await
    }
    async fn clear(&self, inner: &dyn Scheduler) -> QueueResult<u64> {
        self.run_clear_hook().await;
        inner.clear().await
    }
}

#[tokio::test]
async fn a_push_over_an_id_whose_end_never_reached_the_scheduler_is_delivered() {
    for (name, scheduler, store, _dir) in deployments().await {
        let faulty = Arc::new(Intercepted::new(scheduler, Faulty::default()));
        let queue = queue(Arc::clone(&faulty) as Arc<dyn Scheduler>, store, QueueSettings::default());
        let topic = unique_topic("lost-end");
        let job_id = id(&format!("{}-x", common::unique_prefix().replace(':', "_")));

        // A finish whose scheduler write fails: the store has it finished, the
        // scheduler still holds the reservation.
        queue.push(push(&topic, Some(&job_id), "first")).await.expect("push");
        queue.pop(&topic, 1, Duration::ZERO).await.expect("pop");
        faulty.fail_next_removal.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(queue.finish(&job_id, None, None).await.is_err(), "{name}: the finish failed");
        // The same for a delete of a second incarnation.
        queue.push(push(&topic, Some(&job_id), "second")).await.expect("push over a finished job");
        let delivered = queue.pop(&topic, 10, Duration::ZERO).await.expect("pop");
        assert_eq!(delivered.iter().map(|job| job.body.as_str()).collect::<Vec<_>>(), ["second"], "{name}");
        queue.finish(&job_id, None, None).await.expect("finish");

        queue.push(push(&topic, Some(&job_id), "third")).await.expect("push");
        faulty.fail_next_removal.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(queue.delete(&job_id).await.is_err(), "{name}: the delete failed");
        queue.push(push(&topic, Some(&job_id), "fourth")).await.expect("push over a deleted job");
        let delivered = queue.pop(&topic, 10, Duration::ZERO).await.expect("pop");
        assert_eq!(delivered.iter().map(|job| job.body.as_str()).collect::<Vec<_>>(), ["fourth"], "{name}");
        assert_backends_agree(name, &queue, &[job_id]).await;
        queue.close().await;
    }
}

#[tokio::test]
async fn a_replace_refused_because_the_job_was_popped_changes_nothing() {
    for (name, scheduler, store, _dir) in deployments().await {
        let faulty = Arc::new(Intercepted::new(scheduler, Faulty::default()));
        let queue = queue(Arc::clone(&faulty) as Arc<dyn Scheduler>, store, QueueSettings::default());
        let topic = unique_topic("replace");
        let job_id = id(&format!("{}-r", common::unique_prefix().replace(':', "_")));
        queue.push(push(&topic, Some(&job_id), "original")).await.expect("push");
        let hook = {
            let (queue, topic) = (Arc::clone(&queue), topic.clone());
            Box::new(move || {
                tokio::spawn(async move { queue.pop(&topic, 1, Duration::from_secs(2)).await.expect("pop") })
            }) as PopHook
        };
        *faulty.pop_before_replace.lock().expect("hook") = Some(hook);
        let mut replacement = push(&topic, Some(&job_id), "replacement");
        replacement.replace = true;
        assert_wrong_state("replace of a job popped meanwhile", queue.push(replacement).await, JobState::Reserved);
        let pop = faulty.popped.lock().expect("hook").take().expect("the pop ran");
        let popped = pop.await.expect("pop task");
        let bodies: Vec<&str> = popped.iter().map(|job| job.body.as_str()).collect();
        assert_eq!(bodies, ["original"], "{name}: the consumer got the payload the refused replace left");
        let stored = queue.get(&job_id).await.expect("get").job;
        assert_eq!((stored.body.as_str(), stored.state), ("original", JobState::Reserved), "{name}");
        queue.store().flush().await.expect("flush");
        let in_store = queue.store().get(&job_id).await.expect("store get").expect("stored");
        assert_eq!((in_store.body.as_str(), in_store.state), ("original", JobState::Reserved), "{name}");
        queue.close().await;
    }
}

#[tokio::test]
async fn a_push_during_clear_all_is_either_cleared_or_delivered() {
    for (name, scheduler, store, _dir) in deployments().await {
        let faulty = Arc::new(Intercepted::new(scheduler, Faulty::default()));
        let queue = queue(Arc::clone(&faulty) as Arc<dyn Scheduler>, store, QueueSettings::default());
        let topic = unique_topic("clear");
        for index in 0..5 {
            queue.push(push(&topic, None, &format!("old-{index}"))).await.expect("push");
        }
        let late_id = id(&format!("{}-late", common::unique_prefix().replace(':', "_")));
        let hook = {
            let (queue, topic, late_id) = (Arc::clone(&queue), topic.clone(), late_id.clone());
            Box::new(move || {
                tokio::spawn(async move {
                    queue.push(push(&topic, Some(&late_id), "late")).await.expect("late push");
                })
            }) as ClearHook
        };
        *faulty.clear_hook.lock().expect("hook") = Some(hook);
        queue.clear_all().await.expect("clear");
        let late_push = faulty.before_clear.lock().expect("hook").take().expect("the hook ran");
        late_push.await.expect("late push");
        assert_backends_agree(name, &queue, std::slice::from_ref(&late_id)).await;
        let delivered = queue.pop(&topic, 100, Duration::ZERO).await.expect("pop");
        let stored_live = queue.store().get(&late_id).await.expect("get").is_some_and(|job| job.state.is_live());
        assert_eq!(delivered.len(), usize::from(stored_live), "{name}: {delivered:?}");
        queue.close().await;
    }
}

#[tokio::test]
async fn waiting_consumers_are_capped() {
    for (name, scheduler, store, _dir) in deployments().await {
        let settings = QueueSettings { max_waiters: 2, ..QueueSettings::default() };
        let queue = queue(scheduler, store, settings);
        let topic = unique_topic("waiters");
        let waiting: Vec<_> = (0..2)
            .map(|_| {
                let (queue, topic) = (Arc::clone(&queue), topic.clone());
                tokio::spawn(async move { queue.pop(&topic, 1, Duration::from_secs(2)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        match queue.pop(&topic, 1, Duration::from_secs(1)).await {
            Err(QueueError::Busy { limit: 2 }) => {}
            other => panic!("{name}: a third waiter is refused, got {other:?}"),
        }
        assert!(queue.pop(&topic, 1, Duration::ZERO).await.expect("a pop that does not wait").is_empty(), "{name}");
        for waiter in waiting {
            assert!(waiter.await.expect("waiter").expect("pop").is_empty(), "{name}");
        }
        queue.pop(&topic, 1, Duration::from_millis(10)).await.expect("a waiter again once the others left");
        queue.close().await;
    }
}
