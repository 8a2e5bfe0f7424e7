//! Consumer groups on every deployment (the memory scheduler, Redis and Redis
//! Cluster, over SQLite and MariaDB, as the services allow): a due job is
//! delivered once to each group declared then, consumers within a group
//! compete, and each group's delivery has its own acks, retries and dead
//! state. A Redis that loses its data in the middle of a run loses no group's
//! delivery and duplicates none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::deployments::{empty_redis, on_every_deployment, Deployment};
use delayq_common::{Group, JobId, JobState, PushRequest, Snowflake, Timestamp, Topic};
use delayq_queue::{run_fan_out, run_recovery, run_timer, DelayQueue, QueueError, QueueSettings, RecoveryOptions};
use tokio_util::sync::CancellationToken;

mod common;

/// How long a check waits for its deliveries at most.
const PATIENCE: Duration = Duration::from_secs(60);

/// Each (job, group) delivery received, with when it arrived.
type Received = Arc<Mutex<HashMap<(JobId, Group), Vec<Timestamp>>>>;

fn queue_over(deployment: &Deployment) -> Arc<DelayQueue> {
    let (scheduler, store) = (Arc::clone(&deployment.scheduler), Arc::clone(&deployment.store));
    Arc::new(DelayQueue::new(scheduler, store, Snowflake::new(23), QueueSettings::default()))
}

fn unique_topic(stem: &str) -> Topic {
    common::topic(&format!("{stem}.{}", common::unique_prefix().replace([':', '-'], "_")))
}

fn group(name: &str) -> Group {
    Group::parse(name).expect("valid group")
}

fn push(topic: &Topic, id: &JobId, delay: Duration) -> PushRequest {
    PushRequest { ttr: Some(Duration::from_secs(30)), ..common::push_request(topic, Some(id), id.to_string(), delay) }
}

/// The leader's work: the timer and the fan-out (and recovery, when asked).
struct Leader {
    cancel: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Leader {
    fn start(queue: &Arc<DelayQueue>, recovery: bool) -> Leader {
        let cancel = CancellationToken::new();
        let mut tasks = vec![
            tokio::spawn(run_timer(Arc::clone(queue), cancel.clone())),
            tokio::spawn(run_fan_out(Arc::clone(queue), cancel.clone(), || true)),
        ];
        if recovery {
            let options =
                RecoveryOptions { check_every: Duration::from_millis(100), reconcile_every: Duration::from_secs(3600) };
            tasks.push(tokio::spawn(run_recovery(Arc::clone(queue), cancel.clone(), || true, options)));
        }
        Leader { cancel, tasks }
    }

    /// Starts `count` consumers of `group`, each finishing (through the
    /// group's delivery of the job) what it popped before it pops again.
    fn consume(&mut self, queue: &Arc<DelayQueue>, topic: &Topic, group: &Group, count: usize, received: &Received) {
        for _ in 0..count {
            let (queue, topic, group, received) =
                (Arc::clone(queue), topic.clone(), group.clone(), Arc::clone(received));
            let cancel = self.cancel.clone();
            self.tasks.push(tokio::spawn(async move {
                while !cancel.is_cancelled() {
                    let Ok(jobs) = queue.pop_for(None, &topic, Some(&group), 5, Duration::from_millis(100)).await
                    else {
                        // The scheduler may be down for a moment (emptied, restoring).
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    let now = Timestamp::now();
                    for job in jobs {
                        let (job_id, of) = job.id.group_parts().expect("a group's delivery");
                        assert_eq!(of, group, "a consumer of one group got another's delivery");
                        assert!(now >= job.run_at, "{job_id} reached group {group} early");
                        received.lock().expect("lock").entry((job_id.clone(), of)).or_default().push(now);
                        let finish = |delivery: JobId| {
                            let queue = Arc::clone(&queue);
                            async move { queue.finish(&delivery, Some(job.attempt), None).await }
                        };
                        let _ = queue.on_delivery(&job_id, Some(&group), finish).await;
                    }
                }
            }));
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        for task in self.tasks {
            task.await.expect("task");
        }
    }
}

/// Waits until every (job, group) of `expected` arrived, then a while longer
/// for a duplicate to show, and asserts each arrived exactly once.
async fn expect_each_once(name: &str, received: &Received, expected: &[(JobId, Group)]) {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    loop {
        let missing: Vec<_> = {
            let received = received.lock().expect("lock");
            expected.iter().filter(|key| !received.contains_key(key)).cloned().collect()
        };
        if missing.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < give_up, "{name}: never delivered: {missing:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let received = received.lock().expect("lock");
    for key in expected {
        assert_eq!(received[key].len(), 1, "{name}: {key:?} delivered {} times", received[key].len());
    }
    assert_eq!(received.len(), expected.len(), "{name}: deliveries nobody expected");
}

async fn declare(queue: &DelayQueue, topic: &Topic, names: &[&str]) -> Vec<Group> {
    let mut groups = Vec::new();
    for name in names {
        assert!(queue.declare_group(topic, &group(name)).await.expect("declare"), "{name} is new");
        groups.push(group(name));
    }
    groups
}

/// Pushes `count` jobs due 50 ms apart from now; returns each (job, group)
/// delivery `groups` should receive.
async fn push_every_50_ms(
    queue: &DelayQueue,
    topic: &Topic,
    stem: &str,
    count: u64,
    groups: &[Group],
) -> Vec<(JobId, Group)> {
    let stem = delayq_testkit::unique_name(stem);
    let mut expected = Vec::new();
    for index in 0..count {
        let job_id = JobId::parse(format!("{stem}-{index}")).expect("id");
        queue.push(push(topic, &job_id, Duration::from_millis(index * 50))).await.expect("push");
        expected.extend(groups.iter().map(|group| (job_id.clone(), group.clone())));
    }
    expected
}

/// Pops one delivery of `group`, waiting for the fan-out.
async fn pop_one(queue: &DelayQueue, topic: &Topic, group: &Group) -> delayq_common::Job {
    let mut jobs = queue.pop_for(None, topic, Some(group), 1, Duration::from_secs(10)).await.expect("pop");
    jobs.pop().unwrap_or_else(|| panic!("group {group} got nothing"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_due_job_reaches_every_group_once_with_consumers_competing_in_each() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let queue = queue_over(&deployment);
        let topic = unique_topic("fan");
        let groups = declare(&queue, &topic, &["billing", "shipping", "audit"]).await;
        let mut leader = Leader::start(&queue, false);
        let received = Received::default();
        for group in &groups {
            leader.consume(&queue, &topic, group, 3, &received);
        }
        let expected = push_every_50_ms(&queue, &topic, "fan", 30, &groups).await;
        expect_each_once(name, &received, &expected).await;

        let first = &expected[0].0;
        let details = queue.get(first).await.expect("get");
        assert_eq!(details.job.state, JobState::Finished, "{name}: the job ends once handed to its groups");
        let states: Vec<(&str, JobState)> =
            details.deliveries.iter().map(|delivery| (delivery.group.as_str(), delivery.details.job.state)).collect();
        assert_eq!(
            states,
            [("audit", JobState::Finished), ("billing", JobState::Finished), ("shipping", JobState::Finished)],
            "{name}"
        );
        assert!(!details.deliveries[0].details.history.is_empty(), "{name}: each delivery has its history");
        assert!(
            matches!(queue.pop(&topic, 1, Duration::ZERO).await, Err(QueueError::Invalid(ref invalid)) if invalid.field == "group"),
            "{name}: a pop of a topic with groups names one"
        );
        leader.stop().await;
        queue.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nack_or_a_dead_delivery_in_one_group_leaves_the_others_alone() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let queue = queue_over(&deployment);
        let topic = unique_topic("apart");
        let groups = declare(&queue, &topic, &["a", "b"]).await;
        let leader = Leader::start(&queue, false);
        let job_id = JobId::parse(delayq_testkit::unique_name("apart")).expect("id");
        queue.push(PushRequest { max_retries: Some(1), ..push(&topic, &job_id, Duration::ZERO) }).await.expect("push");

        let in_a = pop_one(&queue, &topic, &groups[0]).await;
        let in_b = pop_one(&queue, &topic, &groups[1]).await;
        let nacked = queue.nack(&in_a.id, Some(1), Some(Duration::ZERO)).await.expect("nack in a");
        assert_eq!(nacked.attempt, 2, "{name}");
        let b_now = queue.get(&in_b.id).await.expect("get b").job;
        assert_eq!((b_now.state, b_now.attempt), (JobState::Reserved, 1), "{name}: b's delivery did not move");

        let again = pop_one(&queue, &topic, &groups[0]).await;
        assert_eq!(again.attempt, 2, "{name}: a redelivers its own delivery");
        let dead = queue.nack(&again.id, Some(2), None).await.expect("nack out of retries");
        assert_eq!(dead.state, JobState::Dead, "{name}");
        queue.finish(&in_b.id, Some(1), None).await.expect("finish in b");

        let details = queue.get(&job_id).await.expect("get");
        let states: Vec<JobState> = details.deliveries.iter().map(|delivery| delivery.details.job.state).collect();
        assert_eq!(states, [JobState::Dead, JobState::Finished], "{name}: dead in a, finished in b");
        leader.stop().await;
        queue.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_gets_only_jobs_due_after_it_was_declared_and_that_name_it() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let queue = queue_over(&deployment);
        let topic = unique_topic("late");
        let groups = declare(&queue, &topic, &["early"]).await;
        let leader = Leader::start(&queue, false);
        let stem = delayq_testkit::unique_name("late");
        let first = JobId::parse(format!("{stem}-1")).expect("id");
        queue.push(push(&topic, &first, Duration::ZERO)).await.expect("push");
        assert_eq!(pop_one(&queue, &topic, &groups[0]).await.id, first.for_group(&groups[0]), "{name}");

        let late = declare(&queue, &topic, &["late"]).await.remove(0);
        let none = queue.pop_for(None, &topic, Some(&late), 1, Duration::from_millis(1_500)).await.expect("pop");
        assert!(none.is_empty(), "{name}: a group declared after the job fell due does not get it");

        let named = JobId::parse(format!("{stem}-2")).expect("id");
        let only_late = PushRequest { groups: vec![late.clone()], ..push(&topic, &named, Duration::ZERO) };
        queue.push(only_late).await.expect("push");
        assert_eq!(pop_one(&queue, &topic, &late).await.id, named.for_group(&late), "{name}");
        let none = queue.pop_for(None, &topic, Some(&groups[0]), 1, Duration::from_millis(1_000)).await.expect("pop");
        assert!(none.is_empty(), "{name}: a push naming its groups reaches those alone");

        let finish = |delivery: JobId| {
            let queue = Arc::clone(&queue);
            async move { queue.finish(&delivery, None, None).await }
        };
        let missing = queue.on_delivery(&named, Some(&groups[0]), finish).await;
        assert!(matches!(missing, Err(QueueError::Conflict(_))), "{name}: no such delivery, {missing:?}");
        let nobody = JobId::parse(format!("{stem}-never")).expect("id");
        let missing = queue.on_delivery(&nobody, Some(&late), finish).await;
        assert!(matches!(missing, Err(QueueError::NotFound(ref id)) if *id == nobody), "{name}: {missing:?}");
        leader.stop().await;
        queue.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_cancels_every_groups_delivery_and_a_group_scoped_one_its_own() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let queue = queue_over(&deployment);
        let topic = unique_topic("cancel");
        let groups = declare(&queue, &topic, &["a", "b", "c"]).await;
        let leader = Leader::start(&queue, false);
        let job_id = JobId::parse(delayq_testkit::unique_name("cancel")).expect("id");
        queue.push(push(&topic, &job_id, Duration::ZERO)).await.expect("push");
        pop_one(&queue, &topic, &groups[2]).await;
        let fanned = delayq_testkit::eventually(Duration::from_secs(10), || async {
            let deliveries = queue.store().deliveries_of(&job_id).await.expect("deliveries");
            deliveries.len() == 3
        })
        .await;
        assert!(fanned, "{name}: the job reached its three groups");

        let delete = |delivery: JobId| {
            let queue = Arc::clone(&queue);
            async move { queue.delete(&delivery).await }
        };
        queue.on_delivery(&job_id, Some(&groups[0]), delete).await.expect("delete a's delivery");
        let b = queue.get(&job_id.for_group(&groups[1])).await.expect("b").job;
        assert_eq!(b.state, JobState::Ready, "{name}: b's delivery stays");

        assert_eq!(queue.delete(&job_id).await.expect("delete").state, JobState::Deleted, "{name}");
        let details = queue.get(&job_id).await.expect("get");
        let states: Vec<JobState> = details.deliveries.iter().map(|delivery| delivery.details.job.state).collect();
        assert_eq!(states, [JobState::Deleted; 3], "{name}: every live delivery is cancelled");
        assert!(queue.delete(&job_id).await.is_err(), "{name}: nothing is left to delete");
        let none = queue.pop_for(None, &topic, Some(&groups[1]), 1, Duration::ZERO).await.expect("pop");
        assert!(none.is_empty(), "{name}");
        leader.stop().await;
        queue.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_emptied_in_the_middle_of_a_fan_out_run_loses_and_duplicates_no_delivery() {
    on_every_deployment(|deployment| async move {
        let Some((url, prefix)) = deployment.redis.clone() else { return };
        let name = &deployment.name;
        let queue = queue_over(&deployment);
        let topic = unique_topic("flush");
        let groups = declare(&queue, &topic, &["a", "b", "c"]).await;
        let mut leader = Leader::start(&queue, true);
        let received = Received::default();
        for group in &groups {
            leader.consume(&queue, &topic, group, 2, &received);
        }
        let expected = push_every_50_ms(&queue, &topic, "flush", 60, &groups).await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let halfway = received.lock().expect("lock").len();
        assert!(halfway > 0 && halfway < expected.len(), "{name}: emptied mid-run ({halfway} delivered)");
        empty_redis(&url, &prefix).await;
        expect_each_once(name, &received, &expected).await;
        leader.stop().await;
        queue.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_whose_last_group_is_dropped_is_popped_without_a_group_again() {
    on_every_deployment(|deployment| async move {
        let name = &deployment.name;
        let queue = queue_over(&deployment);
        let topic = unique_topic("dropped");
        let only = declare(&queue, &topic, &["only"]).await.remove(0);
        let leader = Leader::start(&queue, false);
        assert!(queue.drop_group(&topic, &only).await.expect("drop"), "{name}: it was declared");
        assert!(!queue.drop_group(&topic, &only).await.expect("drop again"), "{name}: it is gone");
        let job_id = JobId::parse(delayq_testkit::unique_name("dropped")).expect("id");
        queue.push(push(&topic, &job_id, Duration::ZERO)).await.expect("push");
        let popped = queue.pop(&topic, 1, Duration::from_secs(5)).await.expect("a plain pop again");
        assert_eq!(popped.first().map(|job| &job.id), Some(&job_id), "{name}");
        leader.stop().await;
        queue.close().await;
    })
    .await;
}
