//! Checks of the read path (get, list, restore paging, counts by state and by
//! due time), of clearAll and
//! the run of every shared-safe check at once.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobId, JobState, Timestamp};

use super::bounds::{
    check_counts_follow_every_change, check_history_returns_the_newest_lines, check_purge_dead_of_a_topic,
    check_purge_ended, counts_of,
};
use super::groups::{
    check_declare_and_drop_groups, check_deliveries_are_bounded, check_deliveries_of_a_job,
    check_job_groups_round_trip, check_longest_delivery_names_round_trip,
};
use super::writes::{
    check_batch_with_refused_items, check_biz_key_unique_among_live_jobs, check_changes_of_a_job_within_one_write,
    check_concurrent_inserts_are_durable, check_duplicate_live_id_is_refused, check_ended_jobs_never_move,
    check_history_order_within_a_batch, check_insert_over_ended_job_continues_history,
    check_journal_is_ordered_with_durable_writes, check_live_jobs_never_go_back, check_record_and_history_in_order,
    check_replace,
};
use super::{
    change, get_ok, history_states, insert_new_jobs, insert_ok, job_id, list_all, record_moves, sample_job,
    unique_name, unique_topic, ALL_HISTORY,
};
use crate::store::{due_bucket, job_bucket, DueCursor, JobStore, COARSE_BUCKETS, DUE_BUCKET_MS, FAR_AHEAD_MS};

/// Every field of a job survives an insert and a get; the insert is the first history line.
pub async fn check_insert_get_round_trip(store: Arc<dyn JobStore>) {
    let topic = unique_topic("round-trip");
    let job = Job {
        id: job_id(&unique_name("round-trip")),
        topic: topic.clone(),
        subtopic: Some("eu.orders".into()),
        body: "{\"order\":42,\"note\":\"ünïcödé ✓ 'quoted'\"}".into(),
        biz_key: Some(unique_name("order")),
        create_time: Timestamp::from_millis(1_700_000_000_123),
        delay: Duration::from_millis(1_500),
        run_at: Timestamp::from_millis(1_700_000_001_623),
        ttr: Duration::from_millis(45_000),
        priority: 4,
        max_retries: 7,
        retry_backoff: vec![Duration::from_millis(100), Duration::from_millis(2_500), Duration::from_secs(60)],
        ttl: Duration::from_millis(3_600_000),
        attempt: 2,
        state: JobState::Ready,
        result: Some("partial".into()),
        updated_at: Timestamp::from_millis(1_700_000_000_456),
        groups: Vec::new(),
    };
    insert_ok(&*store, &job).await;
    assert_eq!(get_ok(&*store, &job.id).await, job);

    let plain = sample_job(&unique_name("round-trip-plain"), &topic);
    insert_ok(&*store, &plain).await;
    assert_eq!(get_ok(&*store, &plain.id).await, plain, "empty optional fields round-trip too");

    let history = store.history(&job.id, ALL_HISTORY).await.expect("history");
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!((history[0].state, history[0].attempt, history[0].at), (JobState::Ready, 2, job.updated_at));
    assert!(!history[0].node.is_empty(), "the log names the node");

    let unknown = job_id(&unique_name("never-inserted"));
    assert_eq!(store.get(&unknown).await.expect("get"), None);
    assert!(store.history(&unknown, ALL_HISTORY).await.expect("history").is_empty());
}

/// `get_many` returns every named job that exists, once, in whatever state,
/// through lists longer than one statement takes; an unknown id adds nothing.
pub async fn check_get_many(store: Arc<dyn JobStore>) {
    const JOBS: usize = 300;
    let (_, mut jobs) = insert_new_jobs(&*store, "get-many", JOBS).await;
    let ended = jobs[7].clone();
    record_moves(&*store, Timestamp::now(), &[(&ended, JobState::Deleted)]).await;
    jobs[7] = get_ok(&*store, &ended.id).await;
    assert_eq!(jobs[7].state, JobState::Deleted);
    let by_id = |found: Vec<Job>| {
        let mut found: Vec<(String, Job)> = found.into_iter().map(|job| (job.id.to_string(), job)).collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found.into_iter().map(|(_, job)| job).collect::<Vec<Job>>()
    };
    let mut expected = jobs.clone();
    expected.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    // Every length up to one past a statement's, and the whole list with an
    // unknown id and a repeated one.
    for length in [1, 2, 9, 33, 129] {
        let asked: Vec<JobId> = jobs.iter().take(length).map(|job| job.id.clone()).collect();
        let mut wanted: Vec<Job> = jobs.iter().take(length).cloned().collect();
        wanted.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        let found = store.get_many(&asked).await.unwrap_or_else(|error| panic!("get_many of {length}: {error}"));
        assert_eq!(by_id(found), wanted, "get_many of {length} ids");
    }
    let mut asked: Vec<JobId> = jobs.iter().map(|job| job.id.clone()).collect();
    asked.insert(150, job_id(&unique_name("never-inserted")));
    asked.push(jobs[0].id.clone());
    let found = store.get_many(&asked).await.unwrap_or_else(|error| panic!("get_many: {error}"));
    assert_eq!(by_id(found), expected, "every job once, the ended one as it ended, nothing for the unknown id");
    assert!(store.get_many(&[]).await.expect("get_many of none").is_empty());
}

/// `list` returns a topic's jobs in one state by (run_at, id), strictly after the cursor.
pub async fn check_list_orders_and_pages(store: Arc<dyn JobStore>) {
    let topic = unique_topic("list");
    let prefix = unique_name("list");
    let run_ats = [300u64, 100, 200, 100, 100, 400, 200];
    let base = Timestamp::from_millis(1_800_000_000_000);
    let jobs: Vec<Job> = run_ats
        .iter()
        .enumerate()
        .map(|(index, offset)| {
            let mut job = sample_job(&format!("{prefix}-{index}"), &topic);
            job.run_at = base.plus(Duration::from_millis(*offset));
            job
        })
        .collect();
    let mut finished = sample_job(&format!("{prefix}-finished"), &topic);
    finished.run_at = base;
    let outcomes = store.insert(jobs.iter().cloned().chain([finished.clone()]).collect()).await.expect("insert");
    assert!(outcomes.iter().all(Result::is_ok));
    store.record(vec![change(&finished, JobState::Finished, Timestamp::now())]).await.expect("record");

    let mut expected: Vec<&Job> = jobs.iter().collect();
    expected.sort_by(|a, b| (a.run_at, &a.id).cmp(&(b.run_at, &b.id)));
    let expected_ids: Vec<_> = expected.iter().map(|job| job.id.clone()).collect();
    for page in [1, 3, 7, 50] {
        assert_eq!(list_all(&*store, &topic, JobState::Delay, page).await, expected_ids, "page size {page}");
    }
    assert_eq!(list_all(&*store, &topic, JobState::Finished, 10).await, [finished.id.clone()]);
    assert!(list_all(&*store, &topic, JobState::Ready, 10).await.is_empty());
    assert!(store.list(&topic, JobState::Delay, 0, None).await.expect("list").is_empty());

    let first = store.list(&topic, JobState::Delay, 2, None).await.expect("list");
    assert_eq!(first, expected[..2].iter().map(|job| (*job).clone()).collect::<Vec<_>>(), "rows are whole jobs");

    // By id: pages follow on from the last id read, ended jobs stay in their own state.
    let mut by_id: Vec<_> = jobs.iter().map(|job| job.id.clone()).collect();
    by_id.sort();
    for page in [1, 3, 50] {
        let mut read = Vec::new();
        let mut after = None;
        loop {
            let jobs = store.list_by_id(&topic, JobState::Delay, page, after.as_ref()).await.expect("list_by_id");
            assert!(jobs.len() <= page);
            let Some(last) = jobs.last() else { break };
            after = Some(last.id.clone());
            read.extend(jobs.into_iter().map(|job| job.id));
        }
        assert_eq!(read, by_id, "by id, page size {page}");
    }
    let ended = store.list_by_id(&topic, JobState::Finished, 10, None).await.expect("list_by_id");
    assert_eq!(ended.into_iter().map(|job| job.id).collect::<Vec<_>>(), [finished.id.clone()]);
    assert!(store.list_by_id(&topic, JobState::Delay, 0, None).await.expect("list_by_id").is_empty());
}

/// `live_jobs_due` pages through live jobs by due-time bucket and id, up to a
/// bucket, and leaves ended ones out.
pub async fn check_live_jobs_page_by_due_time(store: Arc<dyn JobStore>) {
    let topic = unique_topic("live");
    let prefix = unique_name("live");
    // Buckets no other check uses: other checks and processes share the table.
    let nanos = u64::from(std::time::UNIX_EPOCH.elapsed().unwrap_or_default().subsec_nanos());
    let first = 500_000_000 + nanos;
    // Five buckets, two jobs each, the later id due first within its bucket;
    // inserted in reverse so that neither id order nor insertion order is due order.
    let jobs: Vec<Job> = (0..10u64)
        .rev()
        .map(|index| {
            let mut job = sample_job(&format!("{prefix}-{index:02}"), &topic);
            let bucket = first + 4 - index / 2;
            job.run_at = Timestamp::from_millis(bucket * DUE_BUCKET_MS + 100 - index % 2);
            // Written shortly before it is due: indexed by its own bucket.
            job.updated_at = Timestamp::from_millis(job.run_at.as_millis() - 1_000);
            job
        })
        .collect();
    let outcomes = store.insert(jobs.clone()).await.expect("insert");
    assert!(outcomes.iter().all(Result::is_ok));
    let id_of = |index: usize| job_id(&format!("{prefix}-{index:02}"));
    let job_of = |index: usize| jobs.iter().find(|job| job.id == id_of(index)).expect("inserted");
    // Changed when they are due: still indexed by their own buckets.
    store.record(vec![change(job_of(9), JobState::Finished, job_of(9).run_at)]).await.expect("record");
    store.record(vec![change(job_of(6), JobState::Reserved, job_of(6).run_at)]).await.expect("record");

    // Up to the fourth bucket: jobs 0 and 1 are in the fifth.
    let through = first + 3;
    let mut after = DueCursor::at_bucket(first);
    let mut read = Vec::new();
    loop {
        let page = store.live_jobs_due(&after, through, 3).await.expect("live_jobs_due");
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        after = DueCursor::after(last);
        read.extend(page);
    }
    let key = |job: &Job| (job_bucket(job.run_at, job.updated_at), job.id.clone());
    assert!(read.windows(2).all(|pair| key(&pair[0]) < key(&pair[1])), "in bucket and id order");
    assert!(read.iter().all(|job| job.state.is_live()), "only live jobs");
    // Job 9 ended.
    let expected: Vec<_> = [8usize, 6, 7, 4, 5, 2, 3].iter().map(|&index| id_of(index)).collect();
    assert_eq!(read.iter().map(|job| job.id.clone()).collect::<Vec<_>>(), expected, "bucket order, up to the last");
    let reserved = read.iter().find(|job| job.id == id_of(6)).map(|job| job.state);
    assert_eq!(reserved, Some(JobState::Reserved), "a restore sees the current state");

    let later = store.live_jobs_due(&DueCursor::at_bucket(first + 2), through, 10).await.expect("live_jobs_due");
    let later: Vec<_> = later.into_iter().map(|job| job.id).collect();
    assert_eq!(later, vec![id_of(4), id_of(5), id_of(2), id_of(3)], "from a bucket on");
    let inverted = store.live_jobs_due(&DueCursor::at_bucket(first + 3), first + 2, 10).await.expect("empty window");
    assert!(inverted.is_empty(), "a window that ends before it starts is empty");
    let from_start = store.live_jobs_due(&DueCursor::start(), far_future(), 1).await;
    assert_eq!(from_start.expect("live_jobs_due").len(), 1, "the first page starts at the first job");
}

/// `count_live_due` counts the live jobs of a topic, or of all, by due-time
/// bucket, leaves ended ones out, and says when it stopped at its scan limit.
pub async fn check_count_live_due(store: Arc<dyn JobStore>) {
    let topic = unique_topic("due-count");
    let other = unique_topic("due-count-other");
    let prefix = unique_name("due-count");
    // Buckets no other check uses (theirs start below 2e9).
    let nanos = u64::from(std::time::UNIX_EPOCH.elapsed().unwrap_or_default().subsec_nanos());
    let first = 2_000_000_000 + nanos;
    let mut jobs = Vec::new();
    for (index, bucket) in [0u64, 1, 1, 2, 2, 2].into_iter().enumerate() {
        jobs.push(due_in_bucket(&format!("{prefix}-{index}"), &topic, first + bucket));
    }
    jobs.push(due_in_bucket(&format!("{prefix}-other"), &other, first + 1));
    let ended = due_in_bucket(&format!("{prefix}-ended"), &topic, first + 1);
    jobs.push(ended.clone());
    let outcomes = store.insert(jobs).await.expect("insert");
    assert!(outcomes.iter().all(Result::is_ok));
    store.record(vec![change(&ended, JobState::Finished, ended.run_at)]).await.expect("record");

    let count = |topic: Option<delayq_common::Topic>, from: u64, to: u64, scan: usize| {
        let store = Arc::clone(&store);
        async move { store.count_live_due(topic.as_ref(), from, to, scan).await.expect("count_live_due") }
    };
    let whole = count(Some(topic.clone()), first, first + 3, 1_000).await;
    assert_eq!((whole.jobs, whole.complete), (6, true), "every live job of the topic in the range");
    let middle = count(Some(topic.clone()), first + 1, first + 2, 1_000).await;
    assert_eq!((middle.jobs, middle.complete), (2, true), "the ended job is left out");
    let every_topic = count(None, first + 1, first + 2, 1_000).await;
    assert_eq!((every_topic.jobs, every_topic.complete), (3, true), "every topic's jobs");
    let cut = count(None, first, first + 3, 4).await;
    assert_eq!((cut.jobs, cut.complete), (4, false), "stops at the scan limit and says so");
    let empty = count(None, first + 2, first + 1, 10).await;
    assert_eq!((empty.jobs, empty.complete), (0, true), "a range that ends before it starts is empty");
}

/// A job of `topic` written shortly before it is due in `bucket`.
fn due_in_bucket(id: &str, topic: &delayq_common::Topic, bucket: u64) -> Job {
    let mut job = sample_job(id, topic);
    job.run_at = Timestamp::from_millis(bucket * DUE_BUCKET_MS + 100);
    job.updated_at = Timestamp::from_millis(job.run_at.as_millis() - 1_000);
    job
}

/// A job written more than [`FAR_AHEAD_MS`] before it is due is indexed at the
/// start of its coarse bucket, and `live_jobs_due` reads it from there, in the
/// order [`DueCursor::after`] continues from.
pub async fn check_far_jobs_page_by_coarse_bucket(store: Arc<dyn JobStore>) {
    let topic = unique_topic("far");
    let prefix = unique_name("far");
    // Coarse buckets no other check uses.
    let nanos = u64::from(std::time::UNIX_EPOCH.elapsed().unwrap_or_default().subsec_nanos());
    let coarse = (2_000_000_000 + nanos) / COARSE_BUCKETS * COARSE_BUCKETS;
    let at = |bucket: u64| Timestamp::from_millis(bucket * DUE_BUCKET_MS + 100);
    let job = |name: &str, run_at: Timestamp, written_before: u64| {
        let mut job = sample_job(&format!("{prefix}-{name}"), &topic);
        job.run_at = run_at;
        job.updated_at = Timestamp::from_millis(run_at.as_millis() - written_before);
        job
    };
    let far = job("far", at(coarse + 5), 2 * FAR_AHEAD_MS);
    let near = job("near", at(coarse + 3), 1_000);
    let next = job("next", at(coarse + COARSE_BUCKETS + 1), FAR_AHEAD_MS + 1);
    assert_eq!(job_bucket(far.run_at, far.updated_at), coarse);
    assert_eq!(job_bucket(near.run_at, near.updated_at), coarse + 3);
    assert_eq!(job_bucket(next.run_at, next.updated_at), coarse + COARSE_BUCKETS);
    let outcomes = store.insert(vec![next.clone(), near.clone(), far.clone()]).await.expect("insert");
    assert!(outcomes.iter().all(Result::is_ok));

    let ids = |through: u64| {
        let store = Arc::clone(&store);
        async move {
            let page = store.live_jobs_due(&DueCursor::at_bucket(coarse), through, 10).await.expect("live_jobs_due");
            page.into_iter().map(|job| job.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(ids(coarse - 1).await, Vec::<JobId>::new(), "nothing before the coarse bucket");
    assert_eq!(ids(coarse).await, vec![far.id.clone()], "the far job at its coarse bucket's start");
    assert_eq!(ids(coarse + 3).await, vec![far.id.clone(), near.id.clone()]);
    assert_eq!(ids(coarse + COARSE_BUCKETS - 1).await, vec![far.id.clone(), near.id.clone()]);
    let all = vec![far.id.clone(), near.id.clone(), next.id.clone()];
    assert_eq!(ids(coarse + COARSE_BUCKETS).await, all, "the next coarse bucket");
    let after_far = store.live_jobs_due(&DueCursor::after(&far), coarse + COARSE_BUCKETS, 10).await;
    let after_far: Vec<_> = after_far.expect("live_jobs_due").into_iter().map(|job| job.id).collect();
    assert_eq!(after_far, vec![near.id, next.id], "a page continues after the far job");
    assert!(due_bucket(far.run_at) > coarse);
}

/// A topic paused stays paused until it is resumed; pausing twice or
/// resuming a running topic changes nothing.
pub async fn check_pause_and_resume_topics(store: Arc<dyn JobStore>) {
    let first = unique_topic("paused");
    let second = unique_topic("paused");
    let ours = |topics: Vec<delayq_common::Topic>| -> Vec<delayq_common::Topic> {
        topics.into_iter().filter(|topic| *topic == first || *topic == second).collect()
    };
    store.set_paused(&first, true, Timestamp::now()).await.expect("pause");
    store.set_paused(&first, true, Timestamp::now()).await.expect("pause again");
    store.set_paused(&second, true, Timestamp::now()).await.expect("pause");
    let mut both = vec![first.clone(), second.clone()];
    both.sort();
    assert_eq!(ours(store.paused_topics().await.expect("paused")), both);
    store.set_paused(&first, false, Timestamp::now()).await.expect("resume");
    store.set_paused(&first, false, Timestamp::now()).await.expect("resume again");
    assert_eq!(ours(store.paused_topics().await.expect("paused")), vec![second.clone()]);
    store.set_paused(&second, false, Timestamp::now()).await.expect("resume");
    assert!(ours(store.paused_topics().await.expect("paused")).is_empty());
}

/// `counts` reports jobs per topic and state.
pub async fn check_counts(store: Arc<dyn JobStore>) {
    let (topic, jobs) = insert_new_jobs(&*store, "counts", 6).await;
    let moves = [(&jobs[0], JobState::Ready), (&jobs[1], JobState::Ready), (&jobs[2], JobState::Finished)];
    record_moves(&*store, Timestamp::now(), &moves).await;
    let counts = counts_of(&*store, &topic).await;
    assert_eq!(counts, [(JobState::Delay, 3), (JobState::Ready, 2), (JobState::Finished, 1)]);
}

/// `ping` answers and empty writes are accepted.
pub async fn check_ping_and_empty_writes(store: Arc<dyn JobStore>) {
    store.ping().await.expect("ping");
    assert!(store.insert(Vec::new()).await.expect("empty insert").is_empty());
    store.record(Vec::new()).await.expect("empty record");
    store.journal(Vec::new());
    store.flush().await.expect("flush");
    assert!(!store.backend().is_empty());
}

/// `delete_all_live` deletes every live job and journals it; ended jobs stay as they are.
///
/// Destructive for everything else in the database: run it on a database of its own.
pub async fn check_delete_all_live(store: Arc<dyn JobStore>) {
    let (topic, jobs) = insert_new_jobs(&*store, "clear", 4).await;
    let now = Timestamp::now();
    let moves = [(&jobs[1], JobState::Ready), (&jobs[2], JobState::Reserved), (&jobs[3], JobState::Finished)];
    record_moves(&*store, now, &moves).await;
    let at = now.plus(Duration::from_millis(10));
    let deleted = store.delete_all_live(at).await.expect("delete_all_live");
    for job in &jobs[..3] {
        assert!(deleted.contains(&job.id), "{} is returned", job.id);
        let stored = get_ok(&*store, &job.id).await;
        assert_eq!((stored.state, stored.updated_at), (JobState::Deleted, at));
        assert_eq!(history_states(&*store, &job.id).await.last(), Some(&JobState::Deleted));
    }
    assert!(!deleted.contains(&jobs[3].id), "ended jobs are not deleted again");
    assert_eq!(get_ok(&*store, &jobs[3].id).await.state, JobState::Finished);
    let live = store.live_jobs_due(&DueCursor::start(), far_future(), 1_000).await.expect("live_jobs_due");
    assert!(live.iter().all(|job| job.topic != topic), "none of ours is live");
    let again = store.delete_all_live(at).await.expect("delete_all_live");
    assert!(jobs.iter().all(|job| !again.contains(&job.id)), "deleted jobs are not deleted twice");
}

/// A due-time bucket after every one a check uses.
fn far_future() -> u64 {
    u64::MAX >> 16
}

/// Runs every shared-safe check at once on one store: they must not disturb each other.
pub async fn check_all_concurrently(store: Arc<dyn JobStore>) {
    tokio::join!(
        check_insert_get_round_trip(Arc::clone(&store)),
        check_get_many(Arc::clone(&store)),
        check_duplicate_live_id_is_refused(Arc::clone(&store)),
        check_insert_over_ended_job_continues_history(Arc::clone(&store)),
        check_history_order_within_a_batch(Arc::clone(&store)),
        check_biz_key_unique_among_live_jobs(Arc::clone(&store)),
        check_replace(Arc::clone(&store)),
        check_record_and_history_in_order(Arc::clone(&store)),
        check_ended_jobs_never_move(Arc::clone(&store)),
        check_live_jobs_never_go_back(Arc::clone(&store)),
        check_changes_of_a_job_within_one_write(Arc::clone(&store)),
        check_journal_is_ordered_with_durable_writes(Arc::clone(&store)),
        check_list_orders_and_pages(Arc::clone(&store)),
        check_live_jobs_page_by_due_time(Arc::clone(&store)),
        check_far_jobs_page_by_coarse_bucket(Arc::clone(&store)),
        check_pause_and_resume_topics(Arc::clone(&store)),
        check_job_groups_round_trip(Arc::clone(&store)),
        check_declare_and_drop_groups(Arc::clone(&store)),
        check_deliveries_of_a_job(Arc::clone(&store)),
        check_longest_delivery_names_round_trip(Arc::clone(&store)),
        check_deliveries_are_bounded(Arc::clone(&store)),
        check_purge_dead_of_a_topic(Arc::clone(&store)),
        check_counts(Arc::clone(&store)),
        check_counts_follow_every_change(Arc::clone(&store)),
        check_purge_ended(Arc::clone(&store)),
        check_history_returns_the_newest_lines(Arc::clone(&store)),
        check_concurrent_inserts_are_durable(Arc::clone(&store)),
        check_batch_with_refused_items(Arc::clone(&store)),
        check_ping_and_empty_writes(Arc::clone(&store)),
    );
}
