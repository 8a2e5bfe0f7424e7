//! Checks of the job records: schedule, get, conflicts, restore, replace,
//! stats and clear.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobState, Timestamp, Topic};

use super::{
    ago_ms, assert_not_found, assert_wrong_state, ids, in_ms, ms, ok, promote, promote_past, reserve_until, state_of,
    Names,
};
use crate::error::QueueError;
use crate::scheduler::{Scheduler, TopicStats};

/// Asserts that `stored` is `sent` in `state`, every client field intact
/// (every field but the payload, from a scheduler that holds none).
fn assert_same_job(scheduler: &dyn Scheduler, stored: Option<Job>, sent: &Job, state: JobState) {
    let stored = stored.unwrap_or_else(|| panic!("job {} is held", sent.id));
    assert_eq!(stored.state, state, "job {} state", sent.id);
    let mut expected = if scheduler.holds_payloads() { sent.clone() } else { sent.clone().without_payload() };
    expected.state = state;
    // Backends may stamp the moment they filed the job.
    expected.updated_at = stored.updated_at;
    assert_eq!(stored, expected, "job {} comes back as scheduled", sent.id);
}

/// A scheduled job is `delay` or `ready` by its `run_at`, and `get` returns it intact.
pub async fn check_schedule_and_get(scheduler: Arc<dyn Scheduler>) {
    assert!(!scheduler.backend().is_empty(), "the backend has a name");
    ok("ping", scheduler.ping().await);
    let names = Names::new("schedule_get");
    let topic = names.topic("q");
    let mut delayed = names.job("delayed", &topic, in_ms(60_000));
    delayed.subtopic = Some("sub".into());
    delayed.biz_key = Some("order-42".into());
    delayed.priority = 3;
    delayed.max_retries = 4;
    delayed.retry_backoff = vec![ms(100), ms(2_000)];
    delayed.ttl = ms(90_000);
    delayed.ttr = ms(5_000);
    delayed.body = "{\"json\": \"body with ünïcode\"}".into();
    let ready = names.job("ready", &topic, ago_ms(1_000));
    ok("schedule", scheduler.schedule(&delayed).await);
    ok("schedule", scheduler.schedule(&ready).await);
    assert_same_job(&*scheduler, ok("get", scheduler.get(&delayed.id).await), &delayed, JobState::Delay);
    assert_same_job(&*scheduler, ok("get", scheduler.get(&ready.id).await), &ready, JobState::Ready);
    assert_eq!(ok("get", scheduler.get(&names.id("nobody")).await), None);
}

/// Reads sent at once each get their own job back, or nothing for an id no job has.
pub async fn check_concurrent_gets(scheduler: Arc<dyn Scheduler>) {
    const JOBS: usize = 30;
    let names = Names::new("gets");
    let topic = names.topic("q");
    let jobs: Vec<Job> = (0..JOBS)
        .map(|i| {
            let mut job = names.job(&format!("j{i}"), &topic, in_ms(60_000));
            job.body = format!("body of job {i}");
            job
        })
        .collect();
    for job in &jobs {
        ok("schedule", scheduler.schedule(job).await);
    }
    let reads = jobs.iter().map(Some).chain((0..10).map(|_| None)).enumerate().map(|(i, job)| {
        let scheduler = Arc::clone(&scheduler);
        let id = job.map_or_else(|| names.id(&format!("nobody{i}")), |job| job.id.clone());
        tokio::spawn(async move { scheduler.get(&id).await })
    });
    let reads: Vec<_> = reads.collect();
    for (i, read) in reads.into_iter().enumerate() {
        let got = ok("get", read.await.unwrap_or_else(|error| panic!("a reading task failed: {error}")));
        match jobs.get(i) {
            Some(job) => assert_same_job(&*scheduler, got, job, JobState::Delay),
            None => assert_eq!(got, None, "read {i} names no job"),
        }
    }
}

/// Scheduling an id that a live job holds is a conflict and changes nothing,
/// alone or in a batch.
pub async fn check_schedule_conflict(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("conflict");
    let topic = names.topic("q");
    let first = names.job("j", &topic, ago_ms(10));
    ok("schedule", scheduler.schedule(&first).await);
    let mut second = names.job("j", &topic, in_ms(60_000));
    second.body = "another body".into();
    let refused = scheduler.schedule(&second).await;
    assert!(matches!(refused, Err(QueueError::Conflict(_))), "a duplicate id is a conflict, got {refused:?}");
    assert_same_job(&*scheduler, ok("get", scheduler.get(&first.id).await), &first, JobState::Ready);

    let reserved = ok("reserve", scheduler.reserve(&topic, 1, Duration::ZERO).await);
    assert_eq!(ids(&reserved), vec![first.id.clone()]);
    let refused = scheduler.schedule(&second).await;
    assert!(matches!(refused, Err(QueueError::Conflict(_))), "a reserved job's id is taken, got {refused:?}");

    let batch = [names.job("b1", &topic, ago_ms(10)), second.clone(), names.job("b2", &topic, in_ms(60_000))];
    let repeat = names.job("b1", &topic, ago_ms(10));
    let jobs = [batch[0].clone(), batch[1].clone(), batch[2].clone(), repeat];
    let outcomes = ok("schedule_batch", scheduler.schedule_batch(&jobs).await);
    let verdicts: Vec<bool> = outcomes.iter().map(|outcome| matches!(outcome, Err(QueueError::Conflict(_)))).collect();
    assert_eq!(verdicts, [false, true, false, true], "each job judged alone: {outcomes:?}");
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok());
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    assert_eq!(ids(&reserved), [names.id("b1")], "the batch added b1 once");
}

/// `stats` counts each of this check's topics by state and leaves out topics without jobs.
pub async fn check_stats(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("stats");
    let busy = names.topic("busy");
    let emptied = names.topic("emptied");
    let unused = names.topic("unused");
    for n in 0..2 {
        ok("schedule", scheduler.schedule(&names.job(&format!("d{n}"), &busy, in_ms(60_000))).await);
    }
    for n in 0..4 {
        ok("schedule", scheduler.schedule(&names.job(&format!("r{n}"), &busy, ago_ms(10))).await);
    }
    let reserved = ok("reserve", scheduler.reserve(&busy, 1, Duration::ZERO).await);
    assert_eq!(reserved.len(), 1);
    let gone = names.job("gone", &emptied, ago_ms(10));
    ok("schedule", scheduler.schedule(&gone).await);
    ok("delete", scheduler.delete(&gone.id).await);

    let stats = ok("stats", scheduler.stats().await);
    let mine: Vec<&TopicStats> =
        stats.iter().filter(|stats| [&busy, &emptied, &unused].contains(&&stats.topic)).collect();
    let expected = TopicStats { topic: busy.clone(), delay: 2, ready: 3, reserved: 1 };
    assert_eq!(mine, [&expected], "only the busy topic, counted by state");
}

/// `restore` adds a job once: again while it is held (in any state) it adds
/// nothing and never duplicates it. Ended jobs are never added. A job stored
/// as reserved comes back reserved until its ttr deadline, then is redelivered.
pub async fn check_restore_is_idempotent(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("restore");
    let topic = names.topic("q");
    let delayed = names.job("delayed", &topic, in_ms(60_000));
    assert!(ok("restore", scheduler.restore(&delayed).await), "an absent job is added");
    assert!(!ok("restore", scheduler.restore(&delayed).await), "a held job is not added again");
    assert_eq!(state_of(&ok("get", scheduler.get(&delayed.id).await)), Some(JobState::Delay));

    let ready = names.job("ready", &topic, ago_ms(10));
    assert!(ok("restore", scheduler.restore(&ready).await));
    assert!(!ok("restore", scheduler.restore(&ready).await));
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    assert_eq!(ids(&reserved), vec![ready.id.clone()], "one copy of the ready job");
    assert!(!ok("restore", scheduler.restore(&ready).await), "a reserved job is held too");
    assert_eq!(state_of(&ok("get", scheduler.get(&ready.id).await)), Some(JobState::Reserved), "left as it was");
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    assert!(reserved.is_empty(), "restore never duplicated it: {reserved:?}");

    for ended in [JobState::Finished, JobState::Deleted, JobState::Dead, JobState::Expired] {
        let mut job = names.job(&format!("ended-{ended}"), &topic, ago_ms(10));
        job.state = ended;
        assert!(!ok("restore", scheduler.restore(&job).await), "a {ended} job is never added");
        assert_eq!(ok("get", scheduler.get(&job.id).await), None);
    }

    // Reserved 29.5 s ago with a 30 s ttr: its consumer has 500 ms left.
    let mut was_reserved = names.job("was_reserved", &topic, ago_ms(40_000));
    was_reserved.state = JobState::Reserved;
    was_reserved.attempt = 3;
    was_reserved.updated_at = ago_ms(29_500);
    let deadline = was_reserved.updated_at.plus(was_reserved.ttr);
    assert!(ok("restore", scheduler.restore(&was_reserved).await));
    let back = ok("get", scheduler.get(&was_reserved.id).await);
    assert_eq!(back.map(|job| (job.state, job.attempt)), Some((JobState::Reserved, 3)), "still reserved");
    promote(&*scheduler).await;
    let early = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    if Timestamp::now() < deadline {
        assert!(early.is_empty(), "not redelivered before its ttr deadline: {early:?}");
    }
    let again = reserve_until(&*scheduler, &topic, 1).await;
    let (job, seen) = &again[0];
    assert_eq!((job.id.clone(), job.attempt), (was_reserved.id.clone(), 4), "redelivered after the deadline");
    assert!(*seen >= deadline, "redelivered at {seen:?}, before its deadline {deadline:?}");
}

/// `restore_batch` restores each job as `restore` does, in order, adding only
/// those the scheduler does not hold.
pub async fn check_restore_batch(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("restore_batch");
    let topic = names.topic("q");
    let held = names.job("held", &topic, in_ms(60_000));
    ok("schedule", scheduler.schedule(&held).await);
    let mut finished = names.job("finished", &topic, ago_ms(10));
    finished.state = JobState::Finished;
    let mut jobs: Vec<Job> = (0..300).map(|index| names.job(&format!("j{index}"), &topic, in_ms(60_000))).collect();
    jobs.insert(10, held.clone());
    jobs.insert(20, finished.clone());
    let fence = ok("open_restore", scheduler.open_restore().await);
    let added = ok("restore_batch", scheduler.restore_batch(&jobs, &fence).await);
    assert_eq!(added.len(), jobs.len(), "one answer per job");
    for (job, added) in jobs.iter().zip(&added) {
        let expected = job.id != held.id && job.id != finished.id;
        assert_eq!(*added, expected, "job {}", job.id);
    }
    assert_eq!(ok("get", scheduler.get(&finished.id).await), None, "an ended job is not added");
    let again = ok("restore_batch", scheduler.restore_batch(&jobs, &fence).await);
    assert!(again.iter().all(|added| !added), "a second restore adds nothing");
    let stats = ok("stats", scheduler.stats().await);
    let mine = stats.iter().find(|stats| stats.topic == topic).map(|stats| stats.delay);
    assert_eq!(mine, Some(301), "each job held once");
}

/// `check_intact` answers `true` for as long as the scheduler keeps its data
/// (after a first check, which may report a never-checked scheduler as lost).
pub async fn check_intact_while_data_kept(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("intact");
    let topic = names.topic("q");
    let _first = ok("check_intact", scheduler.check_intact().await);
    assert!(ok("check_intact", scheduler.check_intact().await), "nothing was lost since the first check");
    ok("schedule", scheduler.schedule(&names.job("a", &topic, in_ms(60_000))).await);
    assert!(ok("check_intact", scheduler.check_intact().await), "a push is not a loss");
}

/// `replace` updates a waiting job in place (same id, one copy, old due time
/// forgotten); a reserved job is `WrongState`, an absent one `NotFound`.
pub async fn check_replace(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("replace");
    let topic = names.topic("q");
    let original = names.job("j", &topic, in_ms(300));
    ok("schedule", scheduler.schedule(&original).await);

    let mut later = names.job("j", &topic, in_ms(60_000));
    later.body = "v2".into();
    let replaced = ok("replace", scheduler.replace(&later).await);
    assert_eq!((replaced.id.clone(), replaced.state), (original.id.clone(), JobState::Delay));
    assert_same_job(&*scheduler, ok("get", scheduler.get(&original.id).await), &later, JobState::Delay);
    promote_past(&*scheduler, original.run_at.plus(ms(100))).await;
    let stored = ok("get", scheduler.get(&original.id).await);
    assert_eq!(state_of(&stored), Some(JobState::Delay), "the old due time is forgotten");

    let mut due = names.job("j", &topic, ago_ms(10));
    due.body = "v3".into();
    assert_eq!(ok("replace", scheduler.replace(&due).await).state, JobState::Ready, "delay to ready");
    let mut urgent = due.clone();
    urgent.body = "v4".into();
    urgent.priority = 0;
    assert_eq!(ok("replace", scheduler.replace(&urgent).await).state, JobState::Ready, "ready to ready");
    let stats = ok("stats", scheduler.stats().await);
    let counts =
        stats.iter().find(|stats| stats.topic == topic).map(|stats| (stats.delay, stats.ready, stats.reserved));
    assert_eq!(counts, Some((0, 1, 0)), "one copy, ready");
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    assert_eq!(ids(&reserved), vec![urgent.id.clone()], "exactly one copy");
    assert_same_job(&*scheduler, reserved.into_iter().next(), &urgent, JobState::Reserved);
    assert_wrong_state("replace of a reserved job", scheduler.replace(&due).await, JobState::Reserved);
    assert_not_found("replace of an absent job", scheduler.replace(&names.job("nobody", &topic, ago_ms(10))).await);

    let back = names.job("back", &topic, ago_ms(10));
    ok("schedule", scheduler.schedule(&back).await);
    let postponed = ok("replace", scheduler.replace(&names.job("back", &topic, in_ms(60_000))).await);
    assert_eq!(postponed.state, JobState::Delay, "ready to delay");
    let reserved = ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await);
    assert!(reserved.is_empty(), "a postponed job left the ready queue: {reserved:?}");
}

/// `clear` removes every job and reports at least as many as this check added.
///
/// It wipes the whole backend, so it only runs with
/// `scheduler_conformance!(exclusive: ..)`, never on a backend other tests share.
pub async fn check_clear(scheduler: Arc<dyn Scheduler>) {
    let names = Names::new("clear");
    let topic = names.topic("q");
    let delayed = names.job("delayed", &topic, in_ms(60_000));
    let ready = names.job("ready", &topic, ago_ms(10));
    let reserved = names.job("reserved", &topic, ago_ms(20));
    for job in [&reserved, &delayed] {
        ok("schedule", scheduler.schedule(job).await);
    }
    assert_eq!(ok("reserve", scheduler.reserve(&topic, 1, Duration::ZERO).await).len(), 1);
    ok("schedule", scheduler.schedule(&ready).await);

    let _first = ok("check_intact", scheduler.check_intact().await);
    let cleared = ok("clear", scheduler.clear().await);
    assert!(cleared >= 3, "cleared {cleared} jobs, this check alone added 3");
    assert!(ok("check_intact", scheduler.check_intact().await), "clearing is not a loss of data");
    for job in [&delayed, &ready, &reserved] {
        assert_eq!(ok("get", scheduler.get(&job.id).await), None, "job {} is gone", job.id);
    }
    let stats = ok("stats", scheduler.stats().await);
    assert!(stats.iter().all(|stats| stats.topic != topic), "no counts left for the topic");
    ok("schedule", scheduler.schedule(&ready).await);
    assert_eq!(ids(&ok("reserve", scheduler.reserve(&topic, 10, Duration::ZERO).await)), vec![ready.id.clone()]);
}

/// Topics cleared and pushed again in another order keep their names: a
/// backend that numbers topics (Redis) numbers them anew after a clear, and
/// a job must never be filed under the number another topic had.
///
/// Exclusive, as [`check_clear`].
pub async fn check_topics_after_clear(scheduler: Arc<dyn Scheduler>) {
    // Enough jobs that each topic reaches every shard of a sharded backend.
    const JOBS: usize = 256;
    let names = Names::new("topics-after-clear");
    let first = names.topic("first");
    let second = names.topic("second");
    let batch = |label: &str, topic: &Topic| -> Vec<Job> {
        (0..JOBS).map(|index| names.job(&format!("{label}-{index}"), topic, in_ms(60_000))).collect()
    };
    let before = batch("before", &first);
    assert!(ok("schedule_batch", scheduler.schedule_batch(&before).await).iter().all(Result::is_ok));
    ok("clear", scheduler.clear().await);

    // Now the second topic is the one a shard meets first.
    let seconds = batch("second", &second);
    let firsts = batch("first", &first);
    for jobs in [&seconds, &firsts] {
        let outcomes = ok("schedule_batch", scheduler.schedule_batch(jobs).await);
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    }
    for job in seconds.iter().chain(&firsts) {
        let held = ok("get", scheduler.get(&job.id).await).unwrap_or_else(|| panic!("job {} is held", job.id));
        assert_eq!(held.topic, job.topic, "job {}", job.id);
    }
    let stats = ok("stats", scheduler.stats().await);
    for topic in [&first, &second] {
        let delayed = stats.iter().find(|stats| &stats.topic == topic).map_or(0, |stats| stats.delay);
        assert_eq!(delayed, JOBS as u64, "delayed jobs of {topic}");
    }
}
