//! Checks of the write path: inserts, replaces, state changes and the journal.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobState, Timestamp};

use super::{
    assert_refused, change, get_ok, history_states, insert_new_jobs, insert_ok, list_all, sample_job, unique_name,
    unique_topic, ALL_HISTORY,
};
use crate::store::{JobStore, StateChange, StoreError};

/// The end of a job and a new push of its id, journaled and written in one
/// batch (behind a large insert that keeps the writer busy), keep their history
/// lines in that order; and a replace after a journaled change likewise.
pub async fn check_history_order_within_a_batch(store: Arc<dyn JobStore>) {
    let topic = unique_topic("batch-order");
    let first = sample_job(&unique_name("batch-order"), &topic);
    insert_ok(&*store, &first).await;
    let mut second = sample_job(first.id.as_str(), &topic);
    second.body = "second life".into();
    let replaced = sample_job(&unique_name("batch-order-replace"), &topic);
    insert_ok(&*store, &replaced).await;
    let mut replacement = replaced.clone();
    replacement.body = "replaced".into();
    let busy: Vec<Job> = (0..1_000).map(|_| sample_job(&unique_name("batch-order-busy"), &topic)).collect();
    let now = Timestamp::now();
    let (busy, reinserted, replaced_outcome) = tokio::join!(
        store.insert(busy),
        async {
            store.journal(vec![change(&first, JobState::Finished, now)]);
            store.insert(vec![second.clone()]).await
        },
        async {
            store.journal(vec![change(&replaced, JobState::Ready, now)]);
            store.replace(replacement.clone()).await
        }
    );
    assert!(busy.expect("insert").iter().all(Result::is_ok));
    assert!(matches!(reinserted.expect("insert").as_slice(), [Ok(())]), "the ended id is free again");
    replaced_outcome.expect("replace");
    assert_eq!(history_states(&*store, &first.id).await, [JobState::Delay, JobState::Finished, JobState::Delay]);
    assert_eq!(history_states(&*store, &replaced.id).await, [JobState::Delay, JobState::Ready, JobState::Delay]);
}

/// Several changes of the same jobs in one write end as applying them one by
/// one would: the row moves only forward and stops at the first end; every
/// change made while the job was live has its history line, none after its end.
pub async fn check_changes_of_a_job_within_one_write(store: Arc<dyn JobStore>) {
    let topic = unique_topic("one-write");
    let ended = sample_job(&unique_name("one-write-ended"), &topic);
    let redelivered = sample_job(&unique_name("one-write-again"), &topic);
    let untouched = sample_job(&unique_name("one-write-other"), &topic);
    for job in [&ended, &redelivered, &untouched] {
        insert_ok(&*store, job).await;
    }
    let t0 = Timestamp::now();
    let at = |ms: u64| t0.plus(Duration::from_millis(ms));
    let mut finished = change(&ended, JobState::Finished, at(4));
    finished.result = Some("done".into());
    let mut second_attempt = change(&redelivered, JobState::Ready, at(3));
    second_attempt.attempt = redelivered.attempt + 1;
    store
        .record(vec![
            change(&ended, JobState::Ready, at(1)),
            change(&redelivered, JobState::Ready, at(1)),
            change(&ended, JobState::Reserved, at(2)),
            change(&redelivered, JobState::Reserved, at(2)),
            change(&ended, JobState::Ready, at(3)),
            second_attempt,
            finished,
            change(&redelivered, JobState::Reserved, at(4)),
            change(&ended, JobState::Reserved, at(5)),
            change(&untouched, JobState::Ready, at(5)),
        ])
        .await
        .expect("record");

    let row = get_ok(&*store, &ended.id).await;
    assert_eq!((row.state, row.result.as_deref()), (JobState::Finished, Some("done")));
    assert_eq!(
        history_states(&*store, &ended.id).await,
        [JobState::Delay, JobState::Ready, JobState::Reserved, JobState::Ready, JobState::Finished],
        "a change that goes back still has its line; a change after the end has none"
    );
    let row = get_ok(&*store, &redelivered.id).await;
    assert_eq!((row.state, row.attempt), (JobState::Ready, redelivered.attempt + 1), "the later attempt wins");
    assert_eq!(
        history_states(&*store, &redelivered.id).await,
        [JobState::Delay, JobState::Ready, JobState::Reserved, JobState::Ready, JobState::Reserved]
    );
    assert_eq!(get_ok(&*store, &untouched.id).await.state, JobState::Ready);
}

/// A run of changes of many jobs in one write: each job keeps its own result,
/// whole, whatever the results of the jobs written beside it (none, short, long).
pub async fn check_results_within_one_write(store: Arc<dyn JobStore>) {
    let topic = unique_topic("results");
    let jobs: Vec<Job> = (0..40).map(|_| sample_job(&unique_name("results"), &topic)).collect();
    assert!(store.insert(jobs.clone()).await.expect("insert").iter().all(Result::is_ok));
    let now = Timestamp::now();
    let long = "ünï ✓ ".repeat(2_000);
    let result_of = |index: usize| match index % 3 {
        0 => None,
        1 => Some(format!("{index}")),
        _ => Some(format!("{index} {long}")),
    };
    let changes: Vec<StateChange> = jobs
        .iter()
        .enumerate()
        .map(|(index, job)| {
            let mut finished = change(job, JobState::Finished, now);
            finished.result = result_of(index);
            finished
        })
        .collect();
    store.record(changes).await.expect("record");
    for (index, job) in jobs.iter().enumerate() {
        let row = get_ok(&*store, &job.id).await;
        assert_eq!(row.state, JobState::Finished);
        assert_eq!(row.result, result_of(index), "the result of job {index}");
    }
}

/// A second insert with the id of a live job is refused and changes nothing.
pub async fn check_duplicate_live_id_is_refused(store: Arc<dyn JobStore>) {
    let topic = unique_topic("dup-id");
    let job = sample_job(&unique_name("dup-id"), &topic);
    insert_ok(&*store, &job).await;
    for live_state in [JobState::Delay, JobState::Ready, JobState::Reserved] {
        if live_state != JobState::Delay {
            store.record(vec![change(&job, live_state, Timestamp::now())]).await.expect("record");
        }
        let mut again = job.clone();
        again.body = "second".into();
        let outcomes = store.insert(vec![again]).await.expect("insert");
        assert_eq!(outcomes.len(), 1);
        assert_refused(&outcomes[0], "IdTaken");
    }
    assert_eq!(get_ok(&*store, &job.id).await.body, job.body);
    assert_eq!(history_states(&*store, &job.id).await, [JobState::Delay, JobState::Ready, JobState::Reserved]);
}

/// An id whose job has ended can be pushed again; the history continues.
pub async fn check_insert_over_ended_job_continues_history(store: Arc<dyn JobStore>) {
    let topic = unique_topic("reinsert");
    for ended in [JobState::Finished, JobState::Deleted, JobState::Dead, JobState::Expired] {
        let first = sample_job(&unique_name("reinsert"), &topic);
        insert_ok(&*store, &first).await;
        let mut end = change(&first, ended, Timestamp::now());
        end.result = Some("done".into());
        store.record(vec![end]).await.expect("record");
        let stored = get_ok(&*store, &first.id).await;
        assert_eq!((stored.state, stored.result.as_deref()), (ended, Some("done")));

        let mut second = sample_job(first.id.as_str(), &topic);
        second.body = "second life".into();
        insert_ok(&*store, &second).await;
        assert_eq!(get_ok(&*store, &first.id).await, second, "the new job replaces the ended row");
        assert_eq!(history_states(&*store, &first.id).await, [JobState::Delay, ended, JobState::Delay]);
    }
}

/// `(topic, biz_key)` names at most one live job; ended jobs and other topics do not block it.
pub async fn check_biz_key_unique_among_live_jobs(store: Arc<dyn JobStore>) {
    let topic = unique_topic("biz");
    let other_topic = unique_topic("biz-other");
    let biz_key = unique_name("key");
    let with_key = |prefix: &str, topic| {
        let mut job = sample_job(&unique_name(prefix), topic);
        job.biz_key = Some(biz_key.clone());
        job
    };
    let holder = with_key("biz-a", &topic);
    insert_ok(&*store, &holder).await;

    let clash = with_key("biz-b", &topic);
    let outcomes = store.insert(vec![clash.clone()]).await.expect("insert");
    match &outcomes[0] {
        Err(StoreError::BizKeyTaken { topic: refused_topic, biz_key: refused_key, id }) => {
            assert_eq!((refused_topic, refused_key), (&topic, &biz_key));
            assert!(id.is_empty() || id == holder.id.as_str(), "names the holder, got {id}");
        }
        other => panic!("expected BizKeyTaken, got {other:?}"),
    }
    assert_eq!(store.get(&clash.id).await.expect("get"), None, "a refused job leaves no row");
    assert!(store.history(&clash.id, ALL_HISTORY).await.expect("history").is_empty(), "nor a history line");

    insert_ok(&*store, &with_key("biz-c", &other_topic)).await;
    let found = store.find_live_by_biz_key(&topic, &biz_key).await.expect("find");
    assert_eq!(found.map(|job| job.id), Some(holder.id.clone()));

    store.record(vec![change(&holder, JobState::Deleted, Timestamp::now())]).await.expect("record");
    assert_eq!(store.find_live_by_biz_key(&topic, &biz_key).await.expect("find"), None);
    insert_ok(&*store, &clash).await;
    let found = store.find_live_by_biz_key(&topic, &biz_key).await.expect("find");
    assert_eq!(found.map(|job| job.id), Some(clash.id.clone()));

    let keyless = [sample_job(&unique_name("biz-none"), &topic), sample_job(&unique_name("biz-none"), &topic)];
    let outcomes = store.insert(keyless.to_vec()).await.expect("insert");
    assert!(outcomes.iter().all(Result::is_ok), "jobs without a key never clash: {outcomes:?}");
}

/// A replace overwrites a live job, keeps its id and appends a history line.
pub async fn check_replace(store: Arc<dyn JobStore>) {
    let topic = unique_topic("replace");
    let mut job = sample_job(&unique_name("replace"), &topic);
    job.biz_key = Some(unique_name("old-key"));
    insert_ok(&*store, &job).await;

    let mut replaced = sample_job(job.id.as_str(), &topic);
    replaced.body = "rescheduled".into();
    replaced.run_at = job.run_at.plus(Duration::from_secs(600));
    replaced.biz_key = Some(unique_name("new-key"));
    replaced.state = JobState::Ready;
    store.replace(replaced.clone()).await.expect("replace");
    assert_eq!(get_ok(&*store, &job.id).await, replaced);
    assert_eq!(history_states(&*store, &job.id).await, [JobState::Delay, JobState::Ready]);
    let old_key = job.biz_key.as_deref().unwrap_or_default();
    assert_eq!(store.find_live_by_biz_key(&topic, old_key).await.expect("find"), None);
    let new_key = replaced.biz_key.as_deref().unwrap_or_default();
    assert!(store.find_live_by_biz_key(&topic, new_key).await.expect("find").is_some());

    let mut other = sample_job(&unique_name("replace-other"), &topic);
    other.biz_key = Some(unique_name("taken"));
    insert_ok(&*store, &other).await;
    let mut stealing = replaced.clone();
    stealing.biz_key = other.biz_key.clone();
    assert_refused(&store.replace(stealing).await, "BizKeyTaken");
    assert_eq!(get_ok(&*store, &job.id).await, replaced, "a refused replace changes nothing");

    let unknown = sample_job(&unique_name("replace-unknown"), &topic);
    assert_refused(&store.replace(unknown.clone()).await, "NotFound");
    assert_eq!(store.get(&unknown.id).await.expect("get"), None);

    store.record(vec![change(&replaced, JobState::Finished, Timestamp::now())]).await.expect("record");
    assert_refused(&store.replace(replaced.clone()).await, "NotFound");
}

/// Recorded changes update the row and append history lines in order.
pub async fn check_record_and_history_in_order(store: Arc<dyn JobStore>) {
    let (topic, jobs) = insert_new_jobs(&*store, "record", 2).await;
    let (job, sibling) = (&jobs[0], &jobs[1]);
    let base = job.updated_at;
    let at = |offset_ms: u64| base.plus(Duration::from_millis(offset_ms));
    let nacked_run_at = at(60_000);
    let step = |state, attempt, run_at, offset_ms| StateChange {
        id: job.id.clone(),
        state,
        attempt,
        run_at,
        at: at(offset_ms),
        result: None,
    };
    let steps = [
        step(JobState::Ready, 1, job.run_at, 10),
        step(JobState::Reserved, 1, job.run_at, 20),
        step(JobState::Delay, 2, nacked_run_at, 30),
        step(JobState::Ready, 2, nacked_run_at, 40),
        step(JobState::Reserved, 2, nacked_run_at, 50),
    ];
    for step in &steps {
        store.record(vec![step.clone()]).await.expect("record");
    }
    let finish = StateChange { result: Some("done".into()), ..step(JobState::Finished, 2, nacked_run_at, 60) };
    let sibling_ready = change(sibling, JobState::Ready, at(60));
    let unknown = change(&sample_job(&unique_name("record-unknown"), &topic), JobState::Ready, at(60));
    store.record(vec![finish, sibling_ready, unknown.clone()]).await.expect("a change of an unknown job is ignored");

    let stored = get_ok(&*store, &job.id).await;
    assert_eq!(
        (stored.state, stored.attempt, stored.run_at, stored.updated_at, stored.result.as_deref()),
        (JobState::Finished, 2, nacked_run_at, at(60), Some("done"))
    );
    let history = store.history(&job.id, ALL_HISTORY).await.expect("history");
    let lines: Vec<(JobState, u32, Timestamp)> =
        history.iter().map(|entry| (entry.state, entry.attempt, entry.at)).collect();
    assert_eq!(
        lines,
        [
            (JobState::Delay, 1, base),
            (JobState::Ready, 1, at(10)),
            (JobState::Reserved, 1, at(20)),
            (JobState::Delay, 2, at(30)),
            (JobState::Ready, 2, at(40)),
            (JobState::Reserved, 2, at(50)),
            (JobState::Finished, 2, at(60)),
        ]
    );
    assert_eq!(get_ok(&*store, &sibling.id).await.state, JobState::Ready, "every change of one call is applied");
    assert_eq!(store.get(&unknown.id).await.expect("get"), None);
    assert!(store.history(&unknown.id, ALL_HISTORY).await.expect("history").is_empty());

    // One call that moves two jobs twice each, interleaved: applied in order.
    let other = sample_job(&unique_name("record-other"), &topic);
    insert_ok(&*store, &other).await;
    let twice = vec![
        change(sibling, JobState::Reserved, at(70)),
        change(&other, JobState::Ready, at(70)),
        StateChange { result: Some("twice".into()), ..change(sibling, JobState::Finished, at(80)) },
        change(&other, JobState::Reserved, at(80)),
    ];
    store.record(twice).await.expect("record");
    let stored = get_ok(&*store, &sibling.id).await;
    assert_eq!((stored.state, stored.result.as_deref()), (JobState::Finished, Some("twice")));
    assert_eq!(
        history_states(&*store, &sibling.id).await,
        [JobState::Delay, JobState::Ready, JobState::Reserved, JobState::Finished]
    );
    assert_eq!(get_ok(&*store, &other.id).await.state, JobState::Reserved);
    assert_eq!(history_states(&*store, &other.id).await, [JobState::Delay, JobState::Ready, JobState::Reserved]);
}

/// A change to a job that has ended is ignored: a late journal entry never revives it;
/// a change to an id no job has creates nothing.
pub async fn check_ended_jobs_never_move(store: Arc<dyn JobStore>) {
    let topic = unique_topic("ended");
    let job = sample_job(&unique_name("ended"), &topic);
    insert_ok(&*store, &job).await;
    let deleted_at = Timestamp::now();
    store.record(vec![change(&job, JobState::Deleted, deleted_at)]).await.expect("record");
    store.record(vec![change(&job, JobState::Ready, deleted_at.plus(Duration::from_millis(5)))]).await.expect("record");
    store.journal(vec![change(&job, JobState::Reserved, deleted_at.plus(Duration::from_millis(6)))]);
    store.flush().await.expect("flush");
    // The same within a run of changes written together, beside a live job and
    // an id no job ever had (which stays unknown: a change never creates a row).
    let live = sample_job(&unique_name("ended-beside"), &topic);
    insert_ok(&*store, &live).await;
    let never = sample_job(&unique_name("ended-never"), &topic);
    let late = deleted_at.plus(Duration::from_millis(7));
    store
        .record(vec![
            change(&job, JobState::Ready, late),
            change(&never, JobState::Ready, late),
            change(&live, JobState::Ready, late),
        ])
        .await
        .expect("record");
    let stored = get_ok(&*store, &job.id).await;
    assert_eq!((stored.state, stored.updated_at), (JobState::Deleted, deleted_at));
    assert_eq!(history_states(&*store, &job.id).await, [JobState::Delay, JobState::Deleted]);
    assert_eq!(store.get(&never.id).await.expect("get"), None);
    assert_eq!(get_ok(&*store, &live.id).await.state, JobState::Ready);
}

/// A live job only moves forward: within one attempt delay, ready, reserved; a
/// change that arrives after a later one (say the timer's `ready` after a pop's
/// `reserved`, journaled by two tasks or two nodes) leaves the row as it is, alone
/// or in a batch, while the history still records it. A later attempt and an
/// ending state always apply.
pub async fn check_live_jobs_never_go_back(store: Arc<dyn JobStore>) {
    let (_, jobs) = insert_new_jobs(&*store, "forward", 2).await;
    let (job, other) = (&jobs[0], &jobs[1]);
    let at = Timestamp::now();
    let later = |ms| at.plus(Duration::from_millis(ms));
    store
        .record(vec![change(job, JobState::Reserved, at), change(other, JobState::Reserved, at)])
        .await
        .expect("record");
    // Late `ready` entries of the same attempt: one alone, then two in one batch.
    store.record(vec![change(job, JobState::Ready, later(1))]).await.expect("record");
    store.journal(vec![change(job, JobState::Delay, later(2)), change(other, JobState::Ready, later(2))]);
    store.flush().await.expect("flush");
    for id in [&job.id, &other.id] {
        let stored = get_ok(&*store, id).await;
        assert_eq!((stored.state, stored.updated_at), (JobState::Reserved, at), "{id} went back");
    }
    let late = [JobState::Delay, JobState::Reserved, JobState::Ready];
    assert_eq!(history_states(&*store, &job.id).await, [&late[..], &[JobState::Delay]].concat());
    assert_eq!(history_states(&*store, &other.id).await, late);
    // A redelivery (the next attempt) moves it to ready; an ending state always applies.
    let mut redelivered = change(job, JobState::Ready, later(3));
    redelivered.attempt = job.attempt + 1;
    store.record(vec![redelivered, change(other, JobState::Finished, later(3))]).await.expect("record");
    let stored = get_ok(&*store, &job.id).await;
    assert_eq!((stored.state, stored.attempt), (JobState::Ready, job.attempt + 1));
    assert_eq!(get_ok(&*store, &other.id).await.state, JobState::Finished);
}

/// A job's journal entries submitted before a durable write of the same job are
/// applied before it; other jobs' entries commit by a flush, and by themselves
/// soon after.
pub async fn check_journal_is_ordered_with_durable_writes(store: Arc<dyn JobStore>) {
    let topic = unique_topic("journal");
    let job = sample_job(&unique_name("journal"), &topic);
    insert_ok(&*store, &job).await;
    let t0 = Timestamp::now();
    store.journal(vec![change(&job, JobState::Ready, t0)]);
    store.journal(vec![change(&job, JobState::Reserved, t0.plus(Duration::from_millis(1)))]);
    store.record(vec![change(&job, JobState::Finished, t0.plus(Duration::from_millis(2)))]).await.expect("record");
    assert_eq!(
        history_states(&*store, &job.id).await,
        [JobState::Delay, JobState::Ready, JobState::Reserved, JobState::Finished],
        "the record waited for the journal entries before it"
    );

    let jobs: Vec<Job> = (0..200).map(|_| sample_job(&unique_name("journal-many"), &topic)).collect();
    let outcomes = store.insert(jobs.clone()).await.expect("insert");
    assert!(outcomes.iter().all(Result::is_ok));
    for job in &jobs {
        store.journal(vec![change(job, JobState::Ready, t0)]);
    }
    let Some(last) = jobs.last() else { return };
    store.record(vec![change(last, JobState::Reserved, t0.plus(Duration::from_millis(1)))]).await.expect("record");
    assert_eq!(
        history_states(&*store, &last.id).await,
        [JobState::Delay, JobState::Ready, JobState::Reserved],
        "the record took its job's journal entry along, in front of it"
    );
    store.flush().await.expect("flush");
    for job in &jobs[..jobs.len() - 1] {
        assert_eq!(get_ok(&*store, &job.id).await.state, JobState::Ready, "flush waits for the journal");
    }

    let flushed = sample_job(&unique_name("journal-flush"), &topic);
    insert_ok(&*store, &flushed).await;
    store.journal(vec![change(&flushed, JobState::Ready, t0)]);
    store.flush().await.expect("flush");
    assert_eq!(get_ok(&*store, &flushed.id).await.state, JobState::Ready, "flush waits for the journal");

    let alone = sample_job(&unique_name("journal-alone"), &topic);
    insert_ok(&*store, &alone).await;
    store.journal(vec![change(&alone, JobState::Ready, t0)]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while get_ok(&*store, &alone.id).await.state != JobState::Ready {
        assert!(tokio::time::Instant::now() < deadline, "a journal entry nobody flushes commits by itself");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Many callers inserting at once are all acknowledged and all durable.
pub async fn check_concurrent_inserts_are_durable(store: Arc<dyn JobStore>) {
    const TASKS: usize = 50;
    const PER_TASK: usize = 10;
    let topic = unique_topic("concurrent");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let store = Arc::clone(&store);
        let topic = topic.clone();
        tasks.spawn(async move {
            for _ in 0..PER_TASK {
                insert_ok(&*store, &sample_job(&unique_name("concurrent"), &topic)).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("insert task");
    }
    let listed = list_all(&*store, &topic, JobState::Delay, 200).await;
    assert_eq!(listed.len(), TASKS * PER_TASK, "every acknowledged insert is stored");
    for id in listed.iter().step_by(25) {
        assert_eq!(history_states(&*store, id).await, [JobState::Delay]);
    }
}

/// In one insert call each job is judged alone; within the call the first of two equal ids wins.
pub async fn check_batch_with_refused_items(store: Arc<dyn JobStore>) {
    let topic = unique_topic("batch");
    let mut held = sample_job(&unique_name("batch-held"), &topic);
    held.biz_key = Some(unique_name("held-key"));
    insert_ok(&*store, &held).await;

    let first = sample_job(&unique_name("batch-a"), &topic);
    let mut same_id = first.clone();
    same_id.body = "second of the same id".into();
    let mut key_clash = sample_job(&unique_name("batch-key"), &topic);
    key_clash.biz_key = held.biz_key.clone();
    let last = sample_job(&unique_name("batch-d"), &topic);
    let batch = vec![first.clone(), held.clone(), key_clash.clone(), same_id, last.clone()];
    let outcomes = store.insert(batch).await.expect("insert");
    assert_eq!(outcomes.len(), 5, "one outcome per job, in order");
    assert!(outcomes[0].is_ok(), "{:?}", outcomes[0]);
    assert_refused(&outcomes[1], "IdTaken");
    assert_refused(&outcomes[2], "BizKeyTaken");
    assert_refused(&outcomes[3], "IdTaken");
    assert!(outcomes[4].is_ok(), "{:?}", outcomes[4]);

    assert_eq!(get_ok(&*store, &first.id).await, first, "the first of two equal ids wins");
    assert_eq!(history_states(&*store, &first.id).await, [JobState::Delay]);
    assert_eq!(store.get(&key_clash.id).await.expect("get"), None);
    assert_eq!(get_ok(&*store, &last.id).await, last);
    assert_eq!(get_ok(&*store, &held.id).await, held);

    // Refusals by id alone (no business key in play), in a larger batch.
    let fresh: Vec<Job> = (0..6).map(|_| sample_job(&unique_name("batch-fresh"), &topic)).collect();
    let mut batch: Vec<Job> = fresh.clone();
    batch.insert(2, held.clone());
    batch.push(fresh[0].clone());
    let outcomes = store.insert(batch).await.expect("insert");
    let refused: Vec<usize> = (0..outcomes.len()).filter(|index| outcomes[*index].is_err()).collect();
    assert_eq!(refused, [2, 7], "{outcomes:?}");
    assert_refused(&outcomes[2], "IdTaken");
    assert_refused(&outcomes[7], "IdTaken");
    for job in &fresh {
        assert_eq!(get_ok(&*store, &job.id).await, *job);
    }
}
