//! Checks of what happens to a job after it is reserved, and of its ends.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobState, Timestamp, Topic};

use super::{
    ago_ms, assert_not_found, assert_wrong_state, ids, in_ms, ms, ok, promote_past, state_of, wait_for, Names,
};
use crate::error::QueueError;
use crate::scheduler::Scheduler;

/// Schedules `job` (due already) and reserves it; returns it as reserved and
/// the wall clock just before the reserve.
async fn schedule_and_reserve(scheduler: &dyn Scheduler, job: &Job) -> (Job, Timestamp) {
    ok("schedule", scheduler.schedule(job).await);
    let before = Timestamp::now();
    let reserved = ok("reserve", scheduler.reserve(&job.topic, 1, Duration::ZERO).await);
    assert_eq!(ids(&reserved), vec![job.id.clone()], "the ready job is reserved");
    (reserved.into_iter().next().unwrap_or_else(|| panic!("reserved one job")), before)
}

async fn reserve_one(scheduler: &dyn Scheduler, topic: &Topic) -> Job {
    let reserved = ok("reserve", scheduler.reserve(topic, 1, Duration::ZERO).await);
    assert_eq!(reserved.len(), 1, "one ready job of {topic}");
    reserved.into_iter().next().unwrap_or_else(|| panic!("reserved one job"))
}

/// A reserved job whose ttr passes is delivered again with `attempt + 1`, no
/// earlier than `ttr` after it was reserved.
pub async fn check_ttr_redelivery(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("ttr");
    let topic = names.topic("q");
    let mut job = names.job("j", &topic, ago_ms(10));
    job.ttr = ms(300);
    let (reserved, before) = schedule_and_reserve(&*scheduler, &job).await;
    assert_eq!((reserved.state, reserved.attempt), (JobState::Reserved, 1));

    let redelivered =
        wait_for(&*scheduler, &job.id, "redelivered", |job| job.is_some_and(|job| job.state == JobState::Ready)).await;
    let earliest = before.plus(job.ttr);
    assert!(redelivered.seen >= earliest, "redelivered by {}, before the ttr ran out at {earliest}", redelivered.seen);
    assert_eq!(redelivered.job.as_ref().map(|job| job.attempt), Some(2), "a redelivery is the next attempt");
    for change in &redelivered.changes {
        assert_eq!((change.state, change.attempt), (JobState::Ready, 2), "promotion reports the redelivery");
    }
    let again = reserve_one(&*scheduler, &topic).await;
    assert_eq!((again.id, again.state, again.attempt), (job.id.clone(), JobState::Reserved, 2));
    assert!(again.run_at >= job.run_at, "runAt never moves back");
}

/// A nacked job comes back after its delay with `attempt + 1`; a zero delay
/// makes it ready at once. Only a reserved job can be nacked.
pub async fn check_nack_with_delay(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("nack");
    let topic = names.topic("q");
    let job = names.job("j", &topic, ago_ms(10));
    schedule_and_reserve(&*scheduler, &job).await;

    let before = Timestamp::now();
    let nacked = ok("nack", scheduler.nack(&job.id, None, ms(400)).await);
    assert_eq!((nacked.state, nacked.attempt), (JobState::Delay, 2), "nacked with a delay");
    assert!(nacked.run_at >= before.plus(ms(400)), "due again {} after the delay", nacked.run_at);
    assert_eq!(state_of(&ok("get", scheduler.get(&job.id).await)), Some(JobState::Delay));
    assert_wrong_state("nack of a delayed job", scheduler.nack(&job.id, None, Duration::ZERO).await, JobState::Delay);

    let received = super::reserve_until(&*scheduler, &topic, 1).await;
    let (again, seen) = &received[0];
    assert!(*seen >= nacked.run_at, "reserved by {seen}, before the nack delay ran out at {}", nacked.run_at);
    assert_eq!((again.state, again.attempt), (JobState::Reserved, 2));

    let nacked = ok("nack", scheduler.nack(&job.id, None, Duration::ZERO).await);
    assert_eq!((nacked.state, nacked.attempt), (JobState::Ready, 3), "nacked without delay");
    let third = reserve_one(&*scheduler, &topic).await;
    assert_eq!((third.id, third.attempt), (job.id.clone(), 3), "ready again at once");

    assert_not_found("nack of an unknown job", scheduler.nack(&names.id("nobody"), None, Duration::ZERO).await);
    let waiting = names.job("waiting", &topic, in_ms(60_000));
    ok("schedule", scheduler.schedule(&waiting).await);
    assert_wrong_state(
        "nack of a waiting job",
        scheduler.nack(&waiting.id, None, Duration::ZERO).await,
        JobState::Delay,
    );
}

/// After `maxRetries` redeliveries, a ttr expiry makes the job dead: it is gone.
pub async fn check_dead_after_ttr_retries(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("dead_ttr");
    let topic = names.topic("q");
    let mut job = names.job("j", &topic, ago_ms(10));
    job.ttr = ms(200);
    job.max_retries = 1;
    schedule_and_reserve(&*scheduler, &job).await;
    wait_for(&*scheduler, &job.id, "redelivered", |job| job.is_some_and(|job| job.state == JobState::Ready)).await;
    let last = reserve_one(&*scheduler, &topic).await;
    assert_eq!(last.attempt, 2, "the one retry");

    let dead = wait_for(&*scheduler, &job.id, "gone", |job| job.is_none()).await;
    if let Some(change) = dead.changes.last() {
        assert_eq!((change.state, change.attempt), (JobState::Dead, 2), "out of retries, the job is dead");
    }
    let reserved = ok("reserve", scheduler.reserve(&topic, 1, Duration::ZERO).await);
    assert!(reserved.is_empty(), "a dead job is never delivered");
}

/// A nack of a job with no retries left makes it dead: it is gone.
pub async fn check_dead_after_nack(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("dead_nack");
    let topic = names.topic("q");
    let mut none = names.job("none", &topic, ago_ms(10));
    none.max_retries = 0;
    schedule_and_reserve(&*scheduler, &none).await;
    let dead = ok("nack", scheduler.nack(&none.id, None, Duration::ZERO).await);
    assert_eq!((dead.state, dead.attempt), (JobState::Dead, 1), "no retries allowed");
    assert_eq!(ok("get", scheduler.get(&none.id).await), None);

    let mut one = names.job("one", &topic, ago_ms(10));
    one.max_retries = 1;
    schedule_and_reserve(&*scheduler, &one).await;
    let retried = ok("nack", scheduler.nack(&one.id, None, Duration::ZERO).await);
    assert_eq!((retried.state, retried.attempt), (JobState::Ready, 2));
    reserve_one(&*scheduler, &topic).await;
    let dead = ok("nack", scheduler.nack(&one.id, None, Duration::ZERO).await);
    assert_eq!((dead.state, dead.attempt), (JobState::Dead, 2), "out of retries");
    assert_eq!(ok("get", scheduler.get(&one.id).await), None);
    let reserved = ok("reserve", scheduler.reserve(&topic, 1, Duration::ZERO).await);
    assert!(reserved.is_empty(), "a dead job is never delivered");
}

/// A ready job not reserved within its ttl after `run_at` expires; a reserved
/// one does not.
pub async fn check_ttl_expiry(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("ttl");
    let topic = names.topic("q");
    let mut ready = names.job("ready", &topic, ago_ms(10));
    ready.ttl = ms(300);
    let mut delayed = names.job("delayed", &topic, in_ms(200));
    delayed.ttl = ms(300);
    let kept_topic = names.topic("kept");
    let mut kept = names.job("kept", &kept_topic, ago_ms(10));
    kept.ttl = ms(300);
    for job in [&ready, &delayed] {
        ok("schedule", scheduler.schedule(job).await);
    }
    schedule_and_reserve(&*scheduler, &kept).await;

    for job in [&ready, &delayed] {
        let expires_at = job.run_at.plus(job.ttl);
        let gone = wait_for(&*scheduler, &job.id, "expired", |seen| {
            if Timestamp::now() < expires_at {
                assert!(seen.is_some(), "job {} vanished before its ttl ran out", job.id);
            }
            seen.is_none()
        })
        .await;
        assert!(gone.seen >= expires_at, "job {} gone by {}, before {expires_at}", job.id, gone.seen);
        if let Some(change) = gone.changes.last() {
            assert_eq!(change.state, JobState::Expired, "promotion reports job {} as expired", job.id);
        }
    }
    promote_past(&*scheduler, kept.run_at.plus(kept.ttl).plus(ms(100))).await;
    let still = ok("get", scheduler.get(&kept.id).await);
    assert_eq!(state_of(&still), Some(JobState::Reserved), "a reserved job does not expire");
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    assert!(reserved.is_empty(), "expired jobs are never delivered: {reserved:?}");
}

/// `touch` restarts the ttr clock of a reserved job; other states refuse it.
pub async fn check_touch_extends_ttr(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("touch");
    let topic = names.topic("q");
    let mut job = names.job("j", &topic, ago_ms(10));
    job.ttr = ms(1_000);
    schedule_and_reserve(&*scheduler, &job).await;
    tokio::time::sleep(ms(400)).await;
    let before = Timestamp::now();
    let touched = ok("touch", scheduler.touch(&job.id, None).await);
    assert_eq!((touched.state, touched.attempt), (JobState::Reserved, 1));

    let redelivered =
        wait_for(&*scheduler, &job.id, "redelivered", |job| job.is_some_and(|job| job.state == JobState::Ready)).await;
    let earliest = before.plus(job.ttr);
    assert!(
        redelivered.seen >= earliest,
        "redelivered by {}, before the touched ttr ran out at {earliest}",
        redelivered.seen
    );
    assert_wrong_state("touch of a ready job", scheduler.touch(&job.id, None).await, JobState::Ready);
    assert_not_found("touch of an unknown job", scheduler.touch(&names.id("nobody"), None).await);
}

/// `finish` ends a reserved job for good; other states refuse it.
pub async fn check_finish(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("finish");
    let topic = names.topic("q");
    let mut job = names.job("j", &topic, ago_ms(10));
    job.ttr = ms(200);
    schedule_and_reserve(&*scheduler, &job).await;
    let finished = ok("finish", scheduler.finish(&job.id, None).await);
    assert_eq!((finished.id.clone(), finished.state), (job.id.clone(), JobState::Reserved), "returned as it was");
    assert_eq!(ok("get", scheduler.get(&job.id).await), None);
    assert_not_found("second finish", scheduler.finish(&job.id, None).await);

    let ready = names.job("ready", &topic, ago_ms(10));
    ok("schedule", scheduler.schedule(&ready).await);
    assert_wrong_state("finish of a ready job", scheduler.finish(&ready.id, None).await, JobState::Ready);
    ok("delete", scheduler.delete(&ready.id).await);

    promote_past(&*scheduler, Timestamp::now().plus(job.ttr).plus(ms(100))).await;
    assert_eq!(ok("get", scheduler.get(&job.id).await), None, "a finished job never comes back");
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    assert!(reserved.is_empty(), "nothing comes back: {reserved:?}");
}

/// Finishes and deletes sent at once are each judged alone: every reserved job
/// is finished exactly once, a second finish of the same job finds nothing, and
/// a finish of a job deleted at the same time ends it at most once.
pub async fn check_concurrent_finishes(scheduler: Arc<dyn Scheduler>) {
    const JOBS: usize = 40;
    let names = Names::new("finishes");
    let topic = names.topic("q");
    let jobs: Vec<Job> = (0..JOBS).map(|i| names.job(&format!("j{i}"), &topic, ago_ms(10))).collect();
    for job in &jobs {
        ok("schedule", scheduler.schedule(job).await);
    }
    let reserved = ok("reserve", scheduler.reserve(&topic, JOBS, Duration::ZERO).await);
    assert_eq!(reserved.len(), JOBS, "every job is reserved");
    let mut calls = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let scheduler = Arc::clone(&scheduler);
        let id = job.id.clone();
        // Jobs 0..10 are finished twice, jobs 10..20 finished and deleted at once.
        let second = match i {
            0..10 => Some(true),
            10..20 => Some(false),
            _ => None,
        };
        calls.push(tokio::spawn(async move {
            let (first, second) = match second {
                Some(finish_again) => {
                    let again = async {
                        if finish_again {
                            scheduler.finish(&id, None).await
                        } else {
                            scheduler.delete(&id).await
                        }
                    };
                    let (first, second) = tokio::join!(scheduler.finish(&id, None), again);
                    (first, Some(second))
                }
                None => (scheduler.finish(&id, None).await, None),
            };
            (id, first, second)
        }));
    }
    for call in calls {
        let (id, first, second) = call.await.unwrap_or_else(|error| panic!("a finishing task failed: {error}"));
        let ended = usize::from(first.is_ok()) + usize::from(matches!(second, Some(Ok(_))));
        assert_eq!(ended, 1, "job {id} ended exactly once: {first:?} / {second:?}");
        for outcome in [Some(first), second].into_iter().flatten() {
            if let Err(error) = outcome {
                assert!(matches!(error, QueueError::NotFound(_)), "job {id}: the loser finds nothing: {error:?}");
            }
        }
        assert_eq!(ok("get", scheduler.get(&id).await), None, "job {id} is gone");
    }
    let stats = ok("stats", scheduler.stats().await);
    assert!(stats.iter().all(|stats| stats.topic != topic), "no live job is left counted: {stats:?}");
}

/// `delete` removes a job in each live state; it never comes back.
pub async fn check_delete_in_each_state(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("delete");
    let topic = names.topic("q");
    let delayed = names.job("delayed", &topic, in_ms(300));
    let ready = names.job("ready", &topic, ago_ms(10));
    ok("schedule", scheduler.schedule(&delayed).await);
    let mut reserved = names.job("reserved", &topic, ago_ms(20));
    reserved.ttr = ms(200);
    schedule_and_reserve(&*scheduler, &reserved).await;
    ok("schedule", scheduler.schedule(&ready).await);

    for (job, state) in [(&delayed, JobState::Delay), (&ready, JobState::Ready), (&reserved, JobState::Reserved)] {
        let deleted = ok("delete", scheduler.delete(&job.id).await);
        assert_eq!((deleted.id.clone(), deleted.state), (job.id.clone(), state), "returned as it was");
        assert_eq!(ok("get", scheduler.get(&job.id).await), None, "deleted {state} job is gone");
        assert_not_found("second delete", scheduler.delete(&job.id).await);
    }
    promote_past(&*scheduler, delayed.run_at.max(Timestamp::now().plus(reserved.ttr)).plus(ms(100))).await;
    for job in [&delayed, &ready, &reserved] {
        assert_eq!(ok("get", scheduler.get(&job.id).await), None, "deleted job {} stays gone", job.id);
    }
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    assert!(reserved.is_empty(), "deleted jobs are never delivered: {reserved:?}");
    let stats = ok("stats", scheduler.stats().await);
    assert!(stats.iter().all(|stats| stats.topic != topic), "a topic with no jobs is not listed");
}
