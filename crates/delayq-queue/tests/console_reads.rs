//! What the web console reads and does through `DelayQueue`, on every
//! deployment the services allow: live jobs by due time, a new due time for
//! a waiting job, a topic's jobs by id, the last hour of this process, and the
//! counts that never wait for the store once it was counted.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{JobState, Snowflake, Timestamp};
use delayq_queue::{ActivityEvent, DelayQueue, QueueError, QueueSettings};

use common::deployments::{on_every_deployment, Deployment};

mod common;

async fn check_console_reads(deployment: Arc<Deployment>) {
    let name = &deployment.name;
    let queue = Arc::new(DelayQueue::new(
        Arc::clone(&deployment.scheduler),
        Arc::clone(&deployment.store),
        Snowflake::new(9),
        QueueSettings::default(),
    ));
    let topic = common::topic(&format!("console.{}", common::unique_prefix().replace([':', '-'], "_")));
    let minute = Duration::from_secs(60);
    let delays = [Duration::ZERO, 10 * minute, 10 * minute, 300 * minute, 300 * minute, 300 * minute, 4_320 * minute];
    let mut ids = Vec::new();
    for delay in delays {
        let pushed = queue.push(common::push_request(&topic, None, "x".to_owned(), delay)).await.expect("push");
        ids.push(pushed.id);
    }

    let due = queue.due_soon(Some(&topic)).await.expect("due soon");
    let counts = [due.minute, due.hour, due.day, due.later];
    assert_eq!(counts.map(|count| count.jobs), [1, 2, 3, 1], "{name}: by due time");
    assert!(counts.iter().all(|count| count.complete), "{name}: every range read whole");
    assert!(queue.due_soon(None).await.expect("every topic").hour.jobs >= 2, "{name}: every topic");

    // The far job moves within the hour: the same job, counted there now.
    let far = ids.last().expect("pushed").clone();
    let moved = queue.reschedule(&far, Timestamp::now().plus(20 * minute)).await.expect("reschedule");
    assert_eq!(moved.id, far, "{name}: the same job");
    let due = queue.due_soon(Some(&topic)).await.expect("due soon");
    assert_eq!([due.minute, due.hour, due.day, due.later].map(|count| count.jobs), [1, 3, 3, 0], "{name}: moved");

    // The job due now is delivered and finished; a reserved job cannot be moved.
    queue.promote_due(Timestamp::now()).await.expect("promote");
    let popped = queue.pop(&topic, 1, Duration::from_secs(2)).await.expect("pop");
    assert_eq!(popped.len(), 1, "{name}: the due job is popped");
    let reserved = &popped[0].id;
    let refused = queue.reschedule(reserved, Timestamp::now().plus(minute)).await;
    assert!(matches!(refused, Err(QueueError::WrongState { state: JobState::Reserved, .. })), "{name}: {refused:?}");
    queue.finish(reserved, None, None).await.expect("finish");

    let activity = queue.activity().report(Timestamp::now());
    let total = |event| activity.minutes.iter().map(|minute| minute.of(event)).sum::<u64>();
    assert_eq!(total(ActivityEvent::Pushed), 8, "{name}: seven pushes and the replace");
    assert_eq!(total(ActivityEvent::Delivered), 1, "{name}");
    assert_eq!(total(ActivityEvent::Finished), 1, "{name}");
    assert_eq!(activity.deliveries, 1, "{name}: one lateness");

    // By id: every delayed job of the topic, in id order, a page at a time.
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let page = queue.list_by_id(&topic, JobState::Delay, 4, after.as_ref()).await.expect("list");
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        listed.extend(page.into_iter().map(|job| job.id));
    }
    let mut waiting: Vec<_> = ids.iter().filter(|id| *id != reserved).cloned().collect();
    waiting.sort();
    assert_eq!(listed, waiting, "{name}: by id");

    // The first count waits for the store, later ones answer from the last.
    let (first, age) = queue.stats_without_waiting(Duration::from_secs(60)).await.expect("stats");
    assert!(age < Duration::from_secs(60), "{name}");
    let finished_of = |stats: &delayq_queue::QueueStats| {
        stats
            .stored
            .iter()
            .filter(|count| count.topic == topic && count.state == JobState::Finished)
            .map(|c| c.count)
            .sum::<u64>()
    };
    assert_eq!(finished_of(&first), 1, "{name}: the finished job is counted");
    let later = queue.push(common::push_request(&topic, None, "y".to_owned(), Duration::from_secs(600))).await;
    later.expect("push");
    let (again, _) = queue.stats_without_waiting(Duration::from_secs(60)).await.expect("stats");
    let live = |stats: &delayq_queue::QueueStats| {
        stats.live.iter().filter(|held| held.topic == topic).map(|held| held.delay).sum::<u64>()
    };
    assert_eq!(live(&again), live(&first) + 1, "{name}: live counts are current");
    queue.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_reads_and_reschedule_on_every_deployment() {
    on_every_deployment(check_console_reads).await;
}
