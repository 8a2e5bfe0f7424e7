//! Burying a reserved job and deleting a dead one (beanstalkd's `bury` and
//! the `delete` of a buried job): a buried job is dead at once, out of the
//! scheduler, listed with the dead, handed out again only once retried; only
//! the delivery a consumer holds can be buried; a dead job deleted is gone,
//! with its history. Reserving a job by its id (`reserve-job`): a delayed, ready
//! or dead job is reserved at once and no pop gets it; a reserved one is not.
//!
//! Runs on the memory scheduler with SQLite, and, when the services are set,
//! with MariaDB, on Redis (with either store) and on Redis Cluster.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{JobState, Snowflake};
use delayq_queue::{DelayQueue, QueueError, QueueSettings};

mod common;

use common::deployments::on_every_deployment;

fn assert_wrong_state<T: std::fmt::Debug>(name: &str, what: &str, outcome: Result<T, QueueError>, state: JobState) {
    match outcome {
        Err(QueueError::WrongState { state: actual, .. }) => assert_eq!(actual, state, "{name}: {what}"),
        other => panic!("{name}: {what}: expected a {state} job to be refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buried_job_is_dead_until_retried_and_a_dead_job_can_be_deleted() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let queue = DelayQueue::new(
            Arc::clone(&deployment.scheduler),
            Arc::clone(&deployment.store),
            Snowflake::new(9),
            QueueSettings::default(),
        );
        let topic = common::topic(&format!("bury.{}", common::unique_prefix().replace([':', '-'], "_")));
        let pushed =
            queue.push(common::push_request(&topic, None, "b".to_owned(), Duration::ZERO)).await.expect("push");
        let id = pushed.id;

        assert_wrong_state(name, "a ready job cannot be buried", queue.bury(&id, None).await, JobState::Ready);
        let popped = queue.pop(&topic, 1, Duration::from_secs(5)).await.expect("pop");
        assert_eq!(popped.len(), 1, "{name}: the job is handed out");
        let attempt = popped[0].attempt;
        match queue.bury(&id, Some(attempt + 1)).await {
            Err(QueueError::StaleAttempt { .. }) => {}
            other => panic!("{name}: another delivery than the one held cannot be buried, got {other:?}"),
        }

        let buried = queue.bury(&id, Some(attempt)).await.expect("bury");
        assert_eq!(buried.state, JobState::Dead, "{name}");
        assert_eq!(queue.get(&id).await.expect("get").job.state, JobState::Dead, "{name}: the store says dead");
        assert_eq!(queue.scheduler().get(&id).await.expect("scheduler get"), None, "{name}: out of the scheduler");
        let dead = queue.list(&topic, JobState::Dead, 10, None).await.expect("list");
        assert_eq!(dead.jobs.iter().map(|job| job.id.clone()).collect::<Vec<_>>(), vec![id.clone()], "{name}");
        assert!(queue.pop(&topic, 1, Duration::ZERO).await.expect("pop").is_empty(), "{name}: not handed out");
        assert_wrong_state(
            name,
            "a dead job cannot be buried again",
            queue.bury(&id, Some(attempt)).await,
            JobState::Dead,
        );

        queue.retry_dead(&id).await.expect("kick");
        let again = queue.pop(&topic, 1, Duration::from_secs(5)).await.expect("pop");
        assert_eq!(again.iter().map(|job| job.id.clone()).collect::<Vec<_>>(), vec![id.clone()], "{name}: kicked back");
        queue.bury(&id, Some(again[0].attempt)).await.expect("bury again");

        assert_wrong_state(
            name,
            "a live job is not deleted as a dead one",
            queue.delete_dead(&pushed_live(&queue, &topic).await).await,
            JobState::Ready,
        );
        queue.delete_dead(&id).await.expect("delete dead");
        match queue.get(&id).await {
            Err(QueueError::NotFound(_)) => {}
            other => panic!("{name}: a deleted dead job is gone with its history, got {other:?}"),
        }
        assert!(queue.list(&topic, JobState::Dead, 10, None).await.expect("list").jobs.is_empty(), "{name}");
        match queue.delete_dead(&id).await {
            Err(QueueError::NotFound(_)) => {}
            other => panic!("{name}: a deleted dead job is not deleted twice, got {other:?}"),
        }
        match queue.delete_dead(&delayq_common::JobId::parse("no-such-job").expect("id")).await {
            Err(QueueError::NotFound(_)) => {}
            other => panic!("{name}: an unknown id is not found, got {other:?}"),
        }
        queue.close().await;
    })
    .await;
}

/// Pushes a ready job to `topic` and returns its id.
async fn pushed_live(queue: &DelayQueue, topic: &delayq_common::Topic) -> delayq_common::JobId {
    queue.push(common::push_request(topic, None, "live".to_owned(), Duration::ZERO)).await.expect("push").id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_or_dead_job_is_reserved_by_its_id() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let queue = DelayQueue::new(
            Arc::clone(&deployment.scheduler),
            Arc::clone(&deployment.store),
            Snowflake::new(10),
            QueueSettings::default(),
        );
        let topic = common::topic(&format!("byid.{}", common::unique_prefix().replace([':', '-'], "_")));
        let push = |body: &str, delay: Duration| common::push_request(&topic, None, body.to_owned(), delay);
        let delayed = queue.push(push("delayed", Duration::from_secs(60))).await.expect("push").id;
        let ready = queue.push(push("ready", Duration::ZERO)).await.expect("push").id;

        let reserved = queue.reserve_job(&delayed).await.expect("reserve a delayed job");
        assert_eq!((reserved.state, reserved.body.as_str()), (JobState::Reserved, "delayed"), "{name}");
        assert_eq!(queue.get(&delayed).await.expect("get").job.state, JobState::Reserved, "{name}");
        assert_wrong_state(name, "a reserved job", queue.reserve_job(&delayed).await, JobState::Reserved);
        queue.finish(&delayed, Some(reserved.attempt), None).await.expect("finish what was reserved by id");

        let reserved = queue.reserve_job(&ready).await.expect("reserve a ready job");
        assert!(queue.pop(&topic, 1, Duration::ZERO).await.expect("pop").is_empty(), "{name}: no pop gets it");
        queue.bury(&ready, Some(reserved.attempt)).await.expect("bury");
        let again = queue.reserve_job(&ready).await.expect("reserve a dead job");
        assert_eq!(again.state, JobState::Reserved, "{name}");
        queue.finish(&ready, Some(again.attempt), None).await.expect("finish");
        assert_wrong_state(name, "a finished job", queue.reserve_job(&ready).await, JobState::Finished);
        match queue.reserve_job(&delayq_common::JobId::parse("no-such-job").expect("id")).await {
            Err(QueueError::NotFound(_)) => {}
            other => panic!("{name}: an unknown id is not found, got {other:?}"),
        }
        queue.close().await;
    })
    .await;
}
