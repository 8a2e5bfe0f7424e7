//! Checks of what keeps the store bounded: retention (purging ended jobs),
//! counts that read no ended row, paged history and the journal's bound.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobState, Timestamp, Topic};

use super::{
    change, get_ok, history_states, insert_new_jobs, insert_ok, job_id, sample_job, unique_name, unique_topic,
    ALL_HISTORY,
};
use crate::store::{JobStore, StateChange};

/// The end time of the jobs [`check_purge_ended`] purges: long before anything
/// else the suite writes, so that a purge up to [`PURGE_CUTOFF`] touches this
/// check's jobs only, whatever else shares the database.
const LONG_AGO: Timestamp = Timestamp::from_millis(400_000_000_000);
/// The purge's cutoff: one hour after [`LONG_AGO`].
const PURGE_CUTOFF: Timestamp = Timestamp::from_millis(400_003_600_000);

/// Returns this topic's counts, sorted by state.
pub async fn counts_of(store: &dyn JobStore, topic: &Topic) -> Vec<(JobState, u64)> {
    let counts = store.counts().await.expect("counts");
    let mut mine: Vec<(JobState, u64)> =
        counts.into_iter().filter(|count| &count.topic == topic).map(|count| (count.state, count.count)).collect();
    mine.sort();
    mine
}

/// A job moved to `state` at `at`.
fn moved(job: &Job, state: JobState, at: Timestamp) -> StateChange {
    change(job, state, at)
}

/// Jobs that ended (in each ended state) before the cutoff are purged with
/// their history, in batches of `limit`; a live job that old, and a job that
/// ended after the cutoff, stay with their history. A purged id is unknown, and
/// may be pushed again as a new job.
pub async fn check_purge_ended(store: Arc<dyn JobStore>) {
    let topic = unique_topic("purge");
    let old_job = |name: &str| {
        let mut job = sample_job(&unique_name(name), &topic);
        job.create_time = LONG_AGO;
        job.updated_at = LONG_AGO;
        job
    };
    let ended: Vec<Job> = ["finished", "deleted", "dead", "expired"].iter().map(|name| old_job(name)).collect();
    let live = old_job("old-live");
    let recent = old_job("recent");
    let all: Vec<Job> = ended.iter().chain([&live, &recent]).cloned().collect();
    assert!(store.insert(all).await.expect("insert").iter().all(Result::is_ok));
    let end = LONG_AGO.plus(Duration::from_millis(1));
    let states = [JobState::Finished, JobState::Deleted, JobState::Dead, JobState::Expired];
    let mut changes: Vec<StateChange> = ended.iter().zip(states).map(|(job, state)| moved(job, state, end)).collect();
    changes.push(moved(&live, JobState::Ready, end));
    let ended_after_cutoff = PURGE_CUTOFF.plus(Duration::from_secs(60));
    changes.push(moved(&recent, JobState::Finished, ended_after_cutoff));
    store.record(changes).await.expect("record");
    let before = [
        (JobState::Ready, 1),
        (JobState::Finished, 2),
        (JobState::Deleted, 1),
        (JobState::Dead, 1),
        (JobState::Expired, 1),
    ];
    assert_eq!(counts_of(&*store, &topic).await, before);

    let mut purged = 0;
    loop {
        let batch = store.purge_ended(PURGE_CUTOFF, 3).await.expect("purge");
        assert!(batch <= 3, "a purge deletes at most its limit");
        purged += batch;
        if batch < 3 {
            break;
        }
    }
    assert_eq!(purged, 4, "the four old ended jobs, in batches");
    for job in &ended {
        assert_eq!(store.get(&job.id).await.expect("get"), None, "{} is purged", job.id);
        assert!(history_states(&*store, &job.id).await.is_empty(), "with its history");
    }
    assert_eq!(get_ok(&*store, &live.id).await.state, JobState::Ready, "a live job is never purged");
    assert_eq!(history_states(&*store, &live.id).await, [JobState::Delay, JobState::Ready]);
    assert_eq!(get_ok(&*store, &recent.id).await.state, JobState::Finished, "it ended after the cutoff");
    assert_eq!(history_states(&*store, &recent.id).await, [JobState::Delay, JobState::Finished]);
    assert_eq!(counts_of(&*store, &topic).await, [(JobState::Ready, 1), (JobState::Finished, 1)]);
    assert_eq!(store.purge_ended(PURGE_CUTOFF, 3).await.expect("purge"), 0, "nothing is left to purge");

    let again = sample_job(ended[0].id.as_str(), &topic);
    insert_ok(&*store, &again).await;
    assert_eq!(history_states(&*store, &again.id).await, [JobState::Delay], "a new job, with a history of its own");
}

/// `purge_dead` deletes the dead jobs of one topic, with their history, in
/// batches of its limit, and nothing else: not another topic's dead jobs, not
/// the topic's jobs in other states.
pub async fn check_purge_dead_of_a_topic(store: Arc<dyn JobStore>) {
    let (topic, jobs) = insert_new_jobs(&*store, "purge-dead", 4).await;
    let (other, others) = insert_new_jobs(&*store, "purge-dead-other", 1).await;
    let now = Timestamp::now();
    let states = [JobState::Dead, JobState::Dead, JobState::Finished, JobState::Ready];
    let mut changes: Vec<StateChange> = jobs.iter().zip(states).map(|(job, state)| moved(job, state, now)).collect();
    changes.push(moved(&others[0], JobState::Dead, now));
    store.record(changes).await.expect("record");

    assert_eq!(store.purge_dead(&topic, 1).await.expect("purge"), 1, "at most its limit");
    assert_eq!(store.purge_dead(&topic, 10).await.expect("purge"), 1);
    assert_eq!(store.purge_dead(&topic, 10).await.expect("purge"), 0, "none left");
    for job in &jobs[..2] {
        assert_eq!(store.get(&job.id).await.expect("get"), None, "{} is purged", job.id);
        assert!(history_states(&*store, &job.id).await.is_empty(), "with its history");
    }
    assert_eq!(counts_of(&*store, &topic).await, [(JobState::Ready, 1), (JobState::Finished, 1)]);
    assert_eq!(counts_of(&*store, &other).await, [(JobState::Dead, 1)], "another topic's dead job stays");

    // One job: only when it is dead.
    assert!(!store.purge_dead_job(&jobs[3].id).await.expect("purge one"), "a ready job stays");
    assert!(!store.purge_dead_job(&jobs[2].id).await.expect("purge one"), "a finished job stays");
    assert!(store.purge_dead_job(&others[0].id).await.expect("purge one"), "a dead job goes");
    assert!(!store.purge_dead_job(&others[0].id).await.expect("purge one"), "once");
    assert_eq!(store.get(&others[0].id).await.expect("get"), None, "{} is purged", others[0].id);
    assert!(history_states(&*store, &others[0].id).await.is_empty(), "with its history");
    assert!(counts_of(&*store, &other).await.is_empty(), "its count with it");
    assert_eq!(counts_of(&*store, &topic).await, [(JobState::Ready, 1), (JobState::Finished, 1)]);
}

/// The ended counts follow every way a job ends, is pushed again over its
/// ended row, or is purged; live counts follow the live states.
pub async fn check_counts_follow_every_change(store: Arc<dyn JobStore>) {
    let (topic, jobs) = insert_new_jobs(&*store, "counts-follow", 5).await;
    assert_eq!(counts_of(&*store, &topic).await, [(JobState::Delay, 5)]);

    let now = Timestamp::now();
    // Several changes of one job in one write: only its end counts, once.
    let changes = vec![
        moved(&jobs[0], JobState::Ready, now),
        moved(&jobs[0], JobState::Reserved, now),
        moved(&jobs[0], JobState::Finished, now),
        moved(&jobs[0], JobState::Deleted, now),
        moved(&jobs[1], JobState::Dead, now),
        moved(&jobs[2], JobState::Ready, now),
    ];
    store.record(changes).await.expect("record");
    store.journal(vec![moved(&jobs[3], JobState::Expired, now)]);
    store.flush().await.expect("flush");
    assert_eq!(
        counts_of(&*store, &topic).await,
        [
            (JobState::Delay, 1),
            (JobState::Ready, 1),
            (JobState::Finished, 1),
            (JobState::Dead, 1),
            (JobState::Expired, 1)
        ]
    );

    // The finished id pushed again: its ended row becomes a live one.
    insert_ok(&*store, &sample_job(jobs[0].id.as_str(), &topic)).await;
    // A refused push over a live id changes nothing.
    let refused = store.insert(vec![sample_job(jobs[4].id.as_str(), &topic)]).await.expect("insert");
    assert!(refused[0].is_err());
    assert_eq!(
        counts_of(&*store, &topic).await,
        [(JobState::Delay, 2), (JobState::Ready, 1), (JobState::Dead, 1), (JobState::Expired, 1)]
    );
}

/// `history(id, limit)` returns the newest `limit` lines, oldest first.
pub async fn check_history_returns_the_newest_lines(store: Arc<dyn JobStore>) {
    let topic = unique_topic("history-page");
    let job = sample_job(&unique_name("history-page"), &topic);
    insert_ok(&*store, &job).await;
    let changes: Vec<StateChange> = (1..=20u64)
        .map(|step| StateChange {
            attempt: u32::try_from(step).expect("small"),
            ..moved(&job, JobState::Ready, job.updated_at.plus(Duration::from_millis(step)))
        })
        .collect();
    store.record(changes).await.expect("record");

    let attempts = |lines: &[crate::store::LogEntry]| lines.iter().map(|line| line.attempt).collect::<Vec<u32>>();
    let all = store.history(&job.id, ALL_HISTORY).await.expect("history");
    assert_eq!(attempts(&all), [1].into_iter().chain(1..=20).collect::<Vec<u32>>(), "the push's line, then 20");
    let newest = store.history(&job.id, 5).await.expect("history");
    assert_eq!(attempts(&newest), [16, 17, 18, 19, 20], "the newest five, oldest first");
    assert_eq!(newest, all[all.len() - 5..], "the same lines as in the whole history");
    assert!(store.history(&job.id, 0).await.expect("history").is_empty());
    let unknown = job_id(&unique_name("history-unknown"));
    assert!(store.history(&unknown, 5).await.expect("history").is_empty());
}
