//! Checks of when and in which order jobs reach consumers.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayq_common::{JobId, JobState, Timestamp};

use super::{ago_ms, ids, in_ms, ms, ok, promote, reserve_until, wait_for, Names, Promoter, WAIT_LIMIT};
use crate::scheduler::Scheduler;

/// Jobs become ready in `run_at` order and are never reserved before it.
pub async fn check_due_order(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("due_order");
    let topic = names.topic("q");
    let base = Timestamp::now();
    // Scheduled out of order; due 150 ms apart.
    for offset in [450, 150, 600, 300] {
        let job = names.job(&format!("at{offset}"), &topic, base.plus(ms(offset)));
        ok("schedule", scheduler.schedule(&job).await);
    }
    let received = reserve_until(&*scheduler, &topic, 4).await;
    let order: Vec<JobId> = received.iter().map(|(job, _)| job.id.clone()).collect();
    let expected: Vec<JobId> = [150, 300, 450, 600].iter().map(|offset| names.id(&format!("at{offset}"))).collect();
    assert_eq!(order, expected, "jobs are delivered in due order");
    for (job, seen) in &received {
        assert!(*seen >= job.run_at, "job {} reserved by {seen}, before its runAt {}", job.id, job.run_at);
        assert_eq!((job.state, job.attempt), (JobState::Reserved, 1), "job {} as reserved", job.id);
    }
}

/// A delayed job stays `delay` (and unreservable) until its `run_at`, then turns `ready`.
pub async fn check_not_ready_before_run_at(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("not_early");
    let topic = names.topic("q");
    let job = names.job("j", &topic, in_ms(400));
    ok("schedule", scheduler.schedule(&job).await);
    let ready = wait_for(&*scheduler, &job.id, "ready", |seen| {
        // Called just after the `get`: a job seen ready while the clock is
        // still before its runAt was promoted early.
        if Timestamp::now() < job.run_at {
            assert_eq!(seen.map(|job| job.state), Some(JobState::Delay), "before its runAt the job is delayed");
        }
        seen.is_some_and(|job| job.state == JobState::Ready)
    })
    .await;
    assert!(ready.seen >= job.run_at, "ready by {}, before its runAt {}", ready.seen, job.run_at);
    for change in &ready.changes {
        assert_eq!((change.state, change.attempt), (JobState::Ready, 1), "promotion reports the job as ready");
    }
}

/// Among ready jobs a lower priority number comes first, then an earlier `run_at`.
pub async fn check_priority_order(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("priority");
    let topic = names.topic("q");
    let run_at = ago_ms(1_000);
    for priority in [3u8, 1, 4, 0, 2] {
        let mut job = names.job(&format!("p{priority}"), &topic, run_at);
        job.priority = priority;
        ok("schedule", scheduler.schedule(&job).await);
    }
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    let expected: Vec<JobId> = (0..5).map(|priority| names.id(&format!("p{priority}"))).collect();
    assert_eq!(ids(&reserved), expected, "ready jobs are reserved by priority");

    let tie = names.topic("tie");
    let base = ago_ms(1_000);
    for offset in [300, 200, 100] {
        ok("schedule", scheduler.schedule(&names.job(&format!("t{offset}"), &tie, base.plus(ms(offset)))).await);
    }
    let mut urgent = names.job("urgent", &tie, base.plus(ms(400)));
    urgent.priority = 0;
    ok("schedule", scheduler.schedule(&urgent).await);
    let reserved = ok("reserve", scheduler.reserve(&tie, 10, Duration::ZERO).await);
    let expected = vec![names.id("urgent"), names.id("t100"), names.id("t200"), names.id("t300")];
    assert_eq!(ids(&reserved), expected, "priority first, then earlier runAt");
}

/// `reserve` returns at most `count` jobs, as many as are ready, without
/// waiting for more once it has one.
pub async fn check_reserve_count(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("count");
    let topic = names.topic("q");
    for n in 0..5 {
        ok("schedule", scheduler.schedule(&names.job(&format!("j{n}"), &topic, ago_ms(10))).await);
    }
    let first = ok("reserve", scheduler.reserve(&topic, 3, Duration::ZERO).await);
    let second = ok("reserve", scheduler.reserve(&topic, 3, Duration::ZERO).await);
    let third = ok("reserve", scheduler.reserve(&topic, 3, Duration::ZERO).await);
    assert_eq!((first.len(), second.len(), third.len()), (3, 2, 0), "up to count, then what is left");
    let all: HashSet<JobId> = first.iter().chain(&second).map(|job| job.id.clone()).collect();
    assert_eq!(all.len(), 5, "five distinct jobs");
    for job in first.iter().chain(&second) {
        assert_eq!(job.state, JobState::Reserved);
        let stored = ok("get", scheduler.get(&job.id).await);
        assert_eq!(stored.map(|job| job.state), Some(JobState::Reserved), "job {} is reserved", job.id);
    }

    let more = names.topic("more");
    for n in 0..3 {
        ok("schedule", scheduler.schedule(&names.job(&format!("m{n}"), &more, ago_ms(10))).await);
    }
    let started = Instant::now();
    let reserved = ok("reserve", scheduler.reserve(&more, 10, Duration::from_secs(5)).await);
    assert_eq!(reserved.len(), 3, "every ready job");
    assert!(started.elapsed() < Duration::from_secs(2), "returned without waiting for a full count");
}

/// A round promotes at most `max_batch` jobs, reports them as they are after
/// the change, and reports the next instant something is due.
pub async fn check_promote_batches(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("batches");
    let topic = names.topic("q");
    let run_at = in_ms(100);
    let mine: Vec<JobId> = (0..5).map(|n| names.id(&format!("j{n}"))).collect();
    for n in 0..5 {
        ok("schedule", scheduler.schedule(&names.job(&format!("j{n}"), &topic, run_at)).await);
    }
    let later = names.job("later", &topic, in_ms(60_000));
    ok("schedule", scheduler.schedule(&later).await);
    let round = ok("promote_due", scheduler.promote_due(Timestamp::now(), 1000).await);
    let next_due = round.next_due.unwrap_or_else(|| panic!("jobs are scheduled, so something is due next"));
    assert!(next_due <= later.run_at, "next_due {next_due} is no later than a scheduled job");

    let give_up = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let round = ok("promote_due", scheduler.promote_due(Timestamp::now(), 2).await);
        assert!(round.changed.len() <= 2, "a round of batch 2 changed {} jobs", round.changed.len());
        if round.changed.len() < 2 {
            assert!(!round.more, "a round that did not fill its batch left nothing due");
        }
        for job in round.changed.iter().filter(|job| mine.contains(&job.id)) {
            assert_eq!((job.state, job.attempt), (JobState::Ready, 1), "promoted job {} as it is now", job.id);
        }
        let mut ready = 0;
        for id in &mine {
            if ok("get", scheduler.get(id).await).is_some_and(|job| job.state == JobState::Ready) {
                ready += 1;
            }
        }
        if ready == mine.len() {
            break;
        }
        assert!(tokio::time::Instant::now() < give_up, "timed out: {ready} of 5 jobs ready");
        tokio::time::sleep(super::POLL).await;
    }
    let stored = ok("get", scheduler.get(&later.id).await);
    assert_eq!(stored.map(|job| job.state), Some(JobState::Delay), "a job due in a minute stays delayed");
}

/// The timer's wakeup signal is raised by a job due sooner than the last
/// reported `next_due`.
pub async fn check_wakeup_on_sooner_job(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("wakeup");
    let topic = names.topic("q");
    let wakeup = scheduler.wakeup();
    let woken = wakeup.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    let round = ok("promote_due", scheduler.promote_due(Timestamp::now(), 1000).await);
    let job = names.job("j", &topic, in_ms(300));
    ok("schedule", scheduler.schedule(&job).await);
    let sooner = match round.next_due {
        Some(next_due) => job.run_at < next_due,
        None => true,
    };
    if sooner {
        let raised = tokio::time::timeout(Duration::from_secs(5), woken).await;
        assert!(raised.is_ok(), "a job due sooner than next_due {:?} wakes the timer", round.next_due);
    }
}

/// A consumer waiting in `reserve` gets a job soon after it becomes due.
pub async fn check_long_poll_wakes_on_due_job(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("long_poll");
    let topic = names.topic("q");
    let _promoter = Promoter::spawn(&scheduler);
    let job = names.job("j", &topic, in_ms(300));
    ok("schedule", scheduler.schedule(&job).await);
    let reserved = ok("reserve", scheduler.reserve(&topic, 1, Duration::from_secs(10)).await);
    let returned = Timestamp::now();
    assert_eq!(ids(&reserved), vec![job.id.clone()], "the waiting reserve got the job");
    assert!(returned >= job.run_at, "reserved by {returned}, before its runAt {}", job.run_at);
    let lateness = returned.since(job.run_at);
    println!("long-poll lateness {lateness:?}");
    assert!(lateness <= Duration::from_secs(1), "a waiting consumer got the job {lateness:?} after its runAt");

    // A job that is ready at once wakes a consumer that is already waiting.
    let waiting = {
        let scheduler = Arc::clone(&scheduler);
        let topic = topic.clone();
        tokio::spawn(async move { scheduler.reserve(&topic, 1, Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let pushed = Instant::now();
    ok("schedule", scheduler.schedule(&names.job("now", &topic, ago_ms(1))).await);
    let reserved = ok("reserve", waiting.await.unwrap_or_else(|error| panic!("waiter: {error}")));
    assert_eq!(ids(&reserved), [names.id("now")]);
    assert!(pushed.elapsed() <= Duration::from_secs(1), "woken {:?} after the push", pushed.elapsed());
}

/// A waiting `reserve` with nothing coming returns empty after about its wait;
/// a zero wait returns at once.
pub async fn check_long_poll_times_out(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("poll_timeout");
    let topic = names.topic("q");
    let started = Instant::now();
    let reserved = ok("reserve", scheduler.reserve(&topic, 1, Duration::from_millis(300)).await);
    let waited = started.elapsed();
    assert!(reserved.is_empty());
    assert!(waited >= Duration::from_millis(250), "returned after {waited:?}, before the 300 ms wait");
    assert!(waited <= Duration::from_secs(3), "returned after {waited:?}, long after the 300 ms wait");

    let started = Instant::now();
    let reserved = ok("reserve", scheduler.reserve(&topic, 5, Duration::ZERO).await);
    assert!(reserved.is_empty());
    assert!(started.elapsed() <= Duration::from_secs(1), "a zero wait returns at once");
}

/// Several consumers waiting on one topic each get distinct jobs, soon after
/// they arrive; one left over gets nothing.
pub async fn check_long_poll_waiters_get_distinct_jobs(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("waiters");
    let topic = names.topic("q");
    let _promoter = Promoter::spawn(&scheduler);
    let wait = Duration::from_secs(5);
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let scheduler = Arc::clone(&scheduler);
            let topic = topic.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let jobs = scheduler.reserve(&topic, 1, wait).await;
                (jobs, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for n in 0..3 {
        ok("schedule", scheduler.schedule(&names.job(&format!("now{n}"), &topic, ago_ms(1))).await);
    }
    ok("schedule", scheduler.schedule(&names.job("soon", &topic, in_ms(300))).await);
    let mut received = Vec::new();
    let mut empty = 0;
    for waiter in waiters {
        let (jobs, waited) = waiter.await.unwrap_or_else(|error| panic!("waiter: {error}"));
        let jobs = ok("reserve", jobs);
        assert!(jobs.len() <= 1, "a waiter asked for one job and got {}", jobs.len());
        if jobs.is_empty() {
            empty += 1;
        } else {
            assert!(waited <= wait / 2, "a waiter got its job only after {waited:?}, late in its {wait:?} wait");
        }
        received.extend(ids(&jobs));
    }
    let distinct: HashSet<JobId> = received.iter().cloned().collect();
    assert_eq!(distinct.len(), received.len(), "no job went to two waiters: {received:?}");
    let expected: HashSet<JobId> = ["now0", "now1", "now2", "soon"].iter().map(|name| names.id(name)).collect();
    assert_eq!(distinct, expected, "every job reached a waiter");
    assert_eq!(empty, 1, "the fifth waiter got nothing");
}

/// Many consumers reserving in batches while jobs come due receive every job exactly once.
pub async fn check_concurrent_consumers_get_each_job_once(scheduler: Arc<dyn Scheduler>) {
    const JOBS: usize = 200;
    let names = Names::new("exactly_once");
    let topic = names.topic("q");
    let _promoter = Promoter::spawn(&scheduler);
    let base = Timestamp::now();
    let jobs: Vec<_> = (0..JOBS)
        .map(|n| {
            let mut job = names.job(&format!("j{n}"), &topic, base.plus(ms((n as u64 * 37) % 400)));
            job.priority = (n % 5) as u8;
            job
        })
        .collect();
    for outcome in ok("schedule_batch", scheduler.schedule_batch(&jobs).await) {
        ok("schedule in batch", outcome);
    }
    let received = Arc::new(Mutex::new(Vec::new()));
    let give_up = tokio::time::Instant::now() + WAIT_LIMIT;
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            let scheduler = Arc::clone(&scheduler);
            let topic = topic.clone();
            let received = Arc::clone(&received);
            tokio::spawn(async move {
                loop {
                    let done = received.lock().map_or(true, |received| received.len() >= JOBS);
                    if done || tokio::time::Instant::now() >= give_up {
                        return;
                    }
                    let jobs = ok("reserve", scheduler.reserve(&topic, 7, Duration::from_millis(200)).await);
                    if let Ok(mut received) = received.lock() {
                        received.extend(ids(&jobs));
                    }
                }
            })
        })
        .collect();
    for consumer in consumers {
        consumer.await.unwrap_or_else(|error| panic!("consumer: {error}"));
    }
    let received = received.lock().map(|received| received.clone()).unwrap_or_default();
    let distinct: HashSet<JobId> = received.iter().cloned().collect();
    assert_eq!(distinct.len(), received.len(), "a job was delivered twice");
    assert_eq!(received.len(), JOBS, "every job was delivered");
    promote(&*scheduler).await;
    let rest = ok("reserve", scheduler.reserve(&topic, 10, Duration::from_millis(200)).await);
    assert!(rest.is_empty(), "nothing is left: {rest:?}");
}
