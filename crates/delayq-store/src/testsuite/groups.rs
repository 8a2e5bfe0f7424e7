//! Checks of consumer groups: the groups a push names, the groups a topic
//! declares, and the deliveries of a job (rows named `<job id>/<group>`).

use std::slice;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::name::MAX_NAME_LEN;
use delayq_common::{Group, Job, JobId, JobState, Timestamp, Topic};

use super::bounds::counts_of;
use super::{
    change, get_ok, history_states, insert_all_ok, insert_ok, job_id, list_all, record_moves, sample_job, unique_name,
    unique_topic,
};
use crate::store::{JobStore, MAX_DELIVERIES};

/// Parses a group name the check chose.
fn group(name: &str) -> Group {
    Group::parse(name).unwrap_or_else(|invalid| panic!("test group {name:?}: {invalid}"))
}

/// Returns `groups` parsed, in order.
fn groups(names: &[&str]) -> Vec<Group> {
    names.iter().map(|name| group(name)).collect()
}

/// Returns `group`'s delivery of `job`: the job under the delivery's id and topic.
fn delivery(job: &Job, group: &Group) -> Job {
    let mut delivery = job.clone();
    delivery.id = job.id.for_group(group);
    delivery.topic = job.topic.for_group(group);
    delivery.body = format!("delivery of {} to {group}", job.id);
    delivery
}

/// Returns the ids of `jobs`, in order.
fn ids(jobs: &[Job]) -> Vec<JobId> {
    jobs.iter().map(|job| job.id.clone()).collect()
}

/// Returns `stem` made unique and padded to the longest name.
fn longest_name(stem: &str, pad: char) -> String {
    let mut name = unique_name(stem);
    let missing = MAX_NAME_LEN.saturating_sub(name.len());
    name.extend(std::iter::repeat_n(pad, missing));
    assert_eq!(name.len(), MAX_NAME_LEN);
    name
}

/// The groups a push names survive every write of a job (a single insert, a
/// multi-row one, a replace, a push over an ended row) and every read; a job
/// that names none reads back with none.
pub async fn check_job_groups_round_trip(store: Arc<dyn JobStore>) {
    let topic = unique_topic("job-groups");
    let mut named = sample_job(&unique_name("job-groups"), &topic);
    named.groups = groups(&["a", "b"]);
    let plain = sample_job(&unique_name("job-groups-plain"), &topic);
    insert_ok(&*store, &named).await;
    insert_ok(&*store, &plain).await;
    assert_eq!(get_ok(&*store, &named.id).await, named);
    assert!(get_ok(&*store, &plain.id).await.groups.is_empty(), "no groups read back as none");

    let mut batch: Vec<Job> = (0..3).map(|_| sample_job(&unique_name("job-groups-batch"), &topic)).collect();
    batch[0].groups = groups(&["billing"]);
    batch[2].groups = groups(&["a", "b.c", "x-y", "z:1", "_"]);
    insert_all_ok(&*store, &batch).await;
    let mut read = store.get_many(&ids(&batch)).await.expect("get_many");
    read.sort_by(|a, b| a.id.cmp(&b.id));
    let mut expected = batch.clone();
    expected.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(read, expected, "a multi-row insert writes each job's groups");
    let listed = store.list(&topic, JobState::Delay, 10, None).await.expect("list");
    let listed_groups = listed.iter().find(|job| job.id == batch[2].id).map(|job| job.groups.clone());
    assert_eq!(listed_groups, Some(batch[2].groups.clone()), "a listing reads the groups");

    let mut replaced = named.clone();
    replaced.groups = groups(&["c"]);
    store.replace(replaced.clone()).await.expect("replace");
    assert_eq!(get_ok(&*store, &named.id).await, replaced, "a replace writes the groups");
    replaced.groups = Vec::new();
    store.replace(replaced.clone()).await.expect("replace");
    assert!(get_ok(&*store, &named.id).await.groups.is_empty(), "a replace without groups clears them");

    record_moves(&*store, Timestamp::now(), &[(&batch[0], JobState::Finished)]).await;
    let mut again = sample_job(batch[0].id.as_str(), &topic);
    again.groups = groups(&["d"]);
    insert_ok(&*store, &again).await;
    assert_eq!(get_ok(&*store, &again.id).await, again, "a push over an ended job writes its groups");
    let bare = sample_job(batch[2].id.as_str(), &topic);
    record_moves(&*store, Timestamp::now(), &[(&batch[2], JobState::Deleted)]).await;
    insert_ok(&*store, &bare).await;
    assert!(get_ok(&*store, &bare.id).await.groups.is_empty(), "and clears those of the ended job");
}

/// Declared groups are listed by topic, then name (byte order); declaring one
/// twice or dropping one that is not declared changes nothing, and says so.
pub async fn check_declare_and_drop_groups(store: Arc<dyn JobStore>) {
    let first = unique_topic("groups");
    let second = unique_topic("groups");
    let ours = |declared: Vec<(Topic, Group)>| -> Vec<(Topic, Group)> {
        declared.into_iter().filter(|(topic, _)| *topic == first || *topic == second).collect()
    };
    let now = Timestamp::now();
    let set = |topic: &Topic, name: &str, declared: bool| {
        let (store, topic, group) = (Arc::clone(&store), topic.clone(), group(name));
        async move { store.set_group(&topic, &group, declared, now).await.expect("set_group") }
    };
    assert!(set(&first, "b", true).await, "a new declaration");
    assert!(set(&first, "a", true).await);
    assert!(set(&first, "B", true).await);
    assert!(!set(&first, "b", true).await, "declared already");
    assert!(set(&second, "a", true).await);
    let mut expected = vec![
        (first.clone(), group("a")),
        (first.clone(), group("b")),
        (first.clone(), group("B")),
        (second.clone(), group("a")),
    ];
    expected.sort();
    assert_eq!(ours(store.groups().await.expect("groups")), expected);

    assert!(set(&first, "b", false).await, "a dropped declaration");
    assert!(!set(&first, "b", false).await, "dropped already");
    assert!(!set(&second, "b", false).await, "never declared");
    expected.retain(|(topic, group)| !(*topic == first && group.as_str() == "b"));
    assert_eq!(ours(store.groups().await.expect("groups")), expected);
    for (topic, group) in &expected {
        assert!(set(topic, group.as_str(), false).await);
    }
    assert!(ours(store.groups().await.expect("groups")).is_empty());
}

/// Deliveries are ordinary rows: `get`, `get_many`, `list` of the delivery
/// topic, `record`, `counts` and `purge_dead` take them, and `deliveries_of`
/// returns exactly the deliveries of one job, in any state, by id: not those of
/// the jobs whose ids merely start like it, sort next to its range, or match it
/// as a `LIKE` pattern (its `_`).
pub async fn check_deliveries_of_a_job(store: Arc<dyn JobStore>) {
    let topic = unique_topic("deliveries");
    let other = unique_topic("deliveries-other");
    let base = unique_name("deliveries");
    assert!(base.contains('_'), "the id holds a LIKE wildcard");
    let job = sample_job(&base, &topic);
    let (a, b) = (group("a"), group("b"));
    let ours = vec![delivery(&job, &a), delivery(&job, &b)];
    let neighbours: Vec<Job> = [
        format!("{base}0"),
        format!("{base}."),
        format!("{base}-"),
        format!("{base}:"),
        format!("{base}a"),
        format!("{base}_1"),
        base.replace('_', "-"),
    ]
    .iter()
    .map(|id| delivery(&sample_job(id, &other), &a))
    .collect();
    // Jobs whose ids are the bounds' neighbours: right after the range, and
    // right before it.
    let mut all = vec![job.clone(), sample_job(&format!("{base}0"), &other), sample_job(&format!("{base}."), &other)];
    all.extend(ours.iter().cloned());
    all.extend(neighbours.iter().cloned());
    insert_all_ok(&*store, &all).await;

    assert_eq!(store.deliveries_of(&job.id).await.expect("deliveries_of"), ours);
    for neighbour in &neighbours {
        let (of, _) = neighbour.id.group_parts().expect("a delivery");
        let read = store.deliveries_of(&of).await.expect("deliveries_of");
        assert_eq!(ids(&read), slice::from_ref(&neighbour.id), "the deliveries of {of}");
    }
    assert!(store.deliveries_of(&ours[0].id).await.expect("deliveries_of").is_empty(), "none of a delivery");
    let unknown = job_id(&unique_name("deliveries-none"));
    assert!(store.deliveries_of(&unknown).await.expect("deliveries_of").is_empty());

    assert_eq!(get_ok(&*store, &ours[0].id).await, ours[0]);
    let mut read = store.get_many(&[ours[1].id.clone(), job.id.clone(), ours[0].id.clone()]).await.expect("get_many");
    read.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(read, [job.clone(), ours[0].clone(), ours[1].clone()]);
    let (topic_a, topic_b) = (topic.for_group(&a), topic.for_group(&b));
    assert_eq!(list_all(&*store, &topic_a, JobState::Delay, 10).await, [ours[0].id.clone()]);

    let now = Timestamp::now();
    record_moves(&*store, now, &[(&ours[0], JobState::Ready), (&ours[1], JobState::Dead)]).await;
    store.journal(vec![change(&ours[0], JobState::Reserved, now)]);
    store.flush().await.expect("flush");
    record_moves(&*store, now, &[(&ours[0], JobState::Finished)]).await;
    let states = [JobState::Delay, JobState::Ready, JobState::Reserved, JobState::Finished];
    assert_eq!(history_states(&*store, &ours[0].id).await, states);
    let read = store.deliveries_of(&job.id).await.expect("deliveries_of");
    let read_states: Vec<JobState> = read.iter().map(|delivery| delivery.state).collect();
    assert_eq!((ids(&read), read_states), (ids(&ours), vec![JobState::Finished, JobState::Dead]), "in any state");
    assert_eq!(get_ok(&*store, &job.id).await, job, "the job itself is left as it is");
    assert_eq!(list_all(&*store, &topic_a, JobState::Finished, 10).await, [ours[0].id.clone()]);
    assert_eq!(counts_of(&*store, &topic_a).await, [(JobState::Finished, 1)]);
    assert_eq!(counts_of(&*store, &topic_b).await, [(JobState::Dead, 1)]);
    assert_eq!(store.purge_dead(&topic_b, 10).await.expect("purge_dead"), 1);
    assert_eq!(ids(&store.deliveries_of(&job.id).await.expect("deliveries_of")), [ours[0].id.clone()]);
}

/// The longest delivery id and topic (a name of the longest length, the mark
/// and a group of the longest length) go through every write and read, and
/// the longest topic and group are declared.
pub async fn check_longest_delivery_names_round_trip(store: Arc<dyn JobStore>) {
    let topic = delayq_testkit::topic(&longest_name("longest-topic", 't'));
    let job = sample_job(&longest_name("longest", 'x'), &topic);
    let longest = group(&"g".repeat(MAX_NAME_LEN));
    let delivery = delivery(&job, &longest);
    assert_eq!(
        (delivery.id.as_str().len(), delivery.topic.as_str().len()),
        (2 * MAX_NAME_LEN + 1, 2 * MAX_NAME_LEN + 1)
    );
    insert_all_ok(&*store, &[job.clone(), delivery.clone()]).await;
    assert_eq!(get_ok(&*store, &delivery.id).await, delivery);
    assert_eq!(store.deliveries_of(&job.id).await.expect("deliveries_of"), slice::from_ref(&delivery));
    record_moves(&*store, Timestamp::now(), &[(&delivery, JobState::Finished)]).await;
    assert_eq!(history_states(&*store, &delivery.id).await, [JobState::Delay, JobState::Finished]);
    assert_eq!(list_all(&*store, &delivery.topic, JobState::Finished, 10).await, slice::from_ref(&delivery.id));
    assert_eq!(counts_of(&*store, &delivery.topic).await, [(JobState::Finished, 1)]);

    assert!(store.set_group(&topic, &longest, true, Timestamp::now()).await.expect("declare"));
    let declared = store.groups().await.expect("groups");
    assert!(declared.contains(&(topic.clone(), longest.clone())), "the longest topic and group");
    assert!(store.set_group(&topic, &longest, false, Timestamp::now()).await.expect("drop"));
}

/// `deliveries_of` returns at most [`MAX_DELIVERIES`], the first by id.
pub async fn check_deliveries_are_bounded(store: Arc<dyn JobStore>) {
    let topic = unique_topic("deliveries-bound");
    let job = sample_job(&unique_name("deliveries-bound"), &topic);
    let mut deliveries: Vec<Job> =
        (0..=MAX_DELIVERIES).map(|index| delivery(&job, &group(&format!("g{index:05}")))).collect();
    insert_all_ok(&*store, &deliveries).await;
    deliveries.sort_by(|x, y| x.id.cmp(&y.id));
    let read = store.deliveries_of(&job.id).await.expect("deliveries_of");
    assert_eq!(ids(&read), ids(&deliveries[..MAX_DELIVERIES]));
}

/// An insert queued ([`JobStore::insert_queued`]) is applied before every
/// write submitted after the call, though nobody awaited it yet: a delivery
/// handed out while its row commits, then popped and acked, has its row
/// before its changes.
pub async fn check_queued_insert_comes_before_later_writes(store: Arc<dyn JobStore>) {
    let topic = unique_topic("queued");
    let job = sample_job(&unique_name("queued"), &topic);
    let t0 = Timestamp::now();
    let insert = store.insert_queued(vec![job.clone()]);
    store.journal(vec![change(&job, JobState::Reserved, t0)]);
    store.record(vec![change(&job, JobState::Finished, t0.plus(Duration::from_millis(1)))]).await.expect("record");
    let outcomes = insert.await.expect("the queued insert");
    assert!(matches!(outcomes.as_slice(), [Ok(())]), "the insert was taken: {outcomes:?}");
    assert_eq!(get_ok(&*store, &job.id).await.state, JobState::Finished, "the later changes applied to the row");
    assert_eq!(
        history_states(&*store, &job.id).await,
        [job.state, JobState::Reserved, JobState::Finished],
        "the row, then the changes queued after it"
    );
    let nothing = store.insert_queued(Vec::new()).await.expect("an empty insert");
    assert!(nothing.is_empty());
}

/// A journaled insert ([`JobStore::journal_insert`]) is written with the
/// changes that reach the store while it is held, leaving the row and its
/// history as writing them one by one would; a write of the job takes its
/// deliveries' held inserts along; a refused one leaves the live row, which
/// takes the changes.
pub async fn check_journaled_insert_takes_its_changes_along(store: Arc<dyn JobStore>) {
    let topic = unique_topic("journaled");
    let job = sample_job(&unique_name("journaled"), &topic);
    insert_ok(&*store, &job).await;
    let mut copy = delivery(&job, &group("g"));
    copy.state = JobState::Ready;
    let t0 = Timestamp::now();
    let at = |ms: u64| t0.plus(Duration::from_millis(ms));
    store.journal_insert(vec![copy.clone()]);
    store.journal(vec![change(&copy, JobState::Reserved, at(1))]);
    store.journal(vec![change(&job, JobState::Finished, at(2))]);
    store.record(vec![change(&copy, JobState::Finished, at(3))]).await.expect("the ack");
    let stored = get_ok(&*store, &copy.id).await;
    assert_eq!((stored.state, stored.updated_at), (JobState::Finished, at(3)), "the ack committed the row with it");
    assert_eq!(stored.body, copy.body);
    assert_eq!(history_states(&*store, &copy.id).await, [JobState::Ready, JobState::Reserved, JobState::Finished]);
    assert!(counts_of(&*store, &copy.topic).await.contains(&(JobState::Finished, 1)), "the ended row is counted");
    store.flush().await.expect("flush");
    assert_eq!(get_ok(&*store, &job.id).await.state, JobState::Finished, "the job's end, journaled after");

    let other = sample_job(&unique_name("journaled-other"), &topic);
    insert_ok(&*store, &other).await;
    let second = delivery(&other, &group("g"));
    store.journal_insert(vec![second.clone()]);
    store.record(vec![change(&other, JobState::Ready, at(4))]).await.expect("a write of the job");
    assert!(store.get(&second.id).await.expect("get").is_some(), "the job's write took its delivery along");

    let live = sample_job(&unique_name("journaled-live"), &topic);
    insert_ok(&*store, &live).await;
    let clash = Job { body: "another body".to_owned(), ..live.clone() };
    store.journal_insert(vec![clash]);
    store.record(vec![change(&live, JobState::Ready, at(5))]).await.expect("record");
    let stored = get_ok(&*store, &live.id).await;
    assert_eq!((stored.state, stored.body), (JobState::Ready, live.body), "the live row stays and takes the change");
    assert_eq!(history_states(&*store, &live.id).await, [live.state, JobState::Ready]);
}
