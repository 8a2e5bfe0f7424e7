//! Proto messages to and from the job model.
//!
//! A push fills the same [`PushInput`] the REST face reads from its JSON body
//! and is checked by [`PushRequest::validate`], so both faces refuse the same
//! input with the same message. Query-like fields follow the REST parameter rules:
//! an empty string counts as absent, and messages use the REST names. A group's
//! delivery is shown as REST shows it: the id and topic of its job, and its group.

use std::collections::BTreeMap;
use std::time::Duration;

use delayq_common::{
    ConsumerName, Group, InvalidField, Job, JobId, JobState, Limits, PushInput, PushRequest, TimeUnit, Timestamp, Topic,
};
use delayq_queue::{ConsumerView, Delivery, QueueStats, TopicGroups};
use delayq_store::LogEntry;
use tonic::Status;

use crate::pb::v1 as pb;
use crate::status::{invalid, invalid_field};

/// Validates a proto push exactly as `POST /push` validates its JSON body.
pub(crate) fn parse_push(
    request: &pb::PushRequest,
    limits: &Limits,
    now: Timestamp,
) -> Result<PushRequest, InvalidField> {
    PushRequest::validate(push_input(request), TimeUnit::Millis, limits, now)
}

/// The push's fields as the REST face would have read them from its JSON body:
/// an empty topic or backoff list, and a false `replace`, are absent.
fn push_input(request: &pb::PushRequest) -> PushInput {
    PushInput {
        topic: Some(request.topic.clone()).filter(|topic| !topic.is_empty()),
        id: request.id.clone(),
        body: request.body.clone(),
        delay: request.delay_ms,
        run_at: request.run_at,
        create_time: request.create_time,
        ttr: request.ttr_ms,
        priority: request.priority,
        max_retries: request.max_retries,
        retry_backoff: Some(request.retry_backoff_ms.clone()).filter(|backoff| !backoff.is_empty()),
        ttl: request.ttl_ms,
        subtopic: request.subtopic.clone(),
        biz_key: request.biz_key.clone(),
        replace: request.replace.then_some(true),
        groups: Some(request.groups.clone()).filter(|groups| !groups.is_empty()),
    }
}

/// Returns a job id given in a request; empty means absent.
pub(crate) fn optional_job_id(value: &str) -> Result<Option<JobId>, Status> {
    optional_job_id_named("jobId", value)
}

/// Returns a job id given in a request, naming it `name` (the REST name of the field) when refused.
pub(crate) fn optional_job_id_named(name: &'static str, value: &str) -> Result<Option<JobId>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    JobId::parse(value).map(Some).map_err(|refused| invalid_field(InvalidField::new(name, refused.reason)))
}

/// Returns the required job id of a request.
pub(crate) fn job_id(value: &str) -> Result<JobId, Status> {
    optional_job_id(value)?.ok_or_else(|| invalid("jobId is required"))
}

/// Returns the required topic of a request.
pub(crate) fn topic(value: &str) -> Result<Topic, Status> {
    if value.is_empty() {
        return Err(invalid("topic is required"));
    }
    Topic::parse(value).map_err(invalid_field)
}

/// Returns the optional consumer name of a request (an empty one is absent).
pub(crate) fn optional_consumer(value: Option<&str>) -> Result<Option<ConsumerName>, Status> {
    value.filter(|name| !name.is_empty()).map(ConsumerName::parse).transpose().map_err(invalid_field)
}

/// Returns the optional group of a request (an empty one is absent).
pub(crate) fn optional_group(value: Option<&str>) -> Result<Option<Group>, Status> {
    value.filter(|group| !group.is_empty()).map(Group::parse).transpose().map_err(invalid_field)
}

/// A consumer as `Stats` lists it.
pub(crate) fn consumer_entry(view: ConsumerView) -> pb::Consumer {
    pb::Consumer {
        consumer: view.key.consumer.to_string(),
        topic: view.key.topic.to_string(),
        group: view.key.group.map(|group| group.to_string()),
        node: view.node,
        last_seen: i64::try_from(view.last_seen.as_millis()).unwrap_or(i64::MAX),
        in_flight: view.in_flight,
    }
}

/// Returns an optional integer in `min..=max`, or `default` when absent.
pub(crate) fn integer_in(name: &str, value: Option<i64>, min: u64, max: u64, default: u64) -> Result<u64, Status> {
    let Some(value) = value else {
        return Ok(default);
    };
    match u64::try_from(value) {
        Ok(value) if (min..=max).contains(&value) => Ok(value),
        _ => Err(invalid(format!("{name} must be from {min} to {max}"))),
    }
}

/// Returns an optional duration in milliseconds, `>= 0`.
pub(crate) fn optional_millis(name: &str, value: Option<i64>) -> Result<Option<Duration>, Status> {
    match value.map(u64::try_from) {
        None => Ok(None),
        Some(Ok(millis)) => Ok(Some(Duration::from_millis(millis))),
        Some(Err(_)) => Err(invalid(format!("{name} must be >= 0"))),
    }
}

/// Returns the optional `attempt` a consumer names: the delivery it holds, from 1.
pub(crate) fn optional_attempt(value: Option<u32>) -> Result<Option<u32>, Status> {
    match value {
        Some(0) => Err(invalid("attempt must be from 1")),
        other => Ok(other),
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn epoch(instant: Timestamp) -> i64 {
    i64::try_from(instant.as_millis()).unwrap_or(i64::MAX)
}

/// Returns the proto value of a state.
pub(crate) fn state(state: JobState) -> i32 {
    let state = match state {
        JobState::Delay => pb::JobState::Delay,
        JobState::Ready => pb::JobState::Ready,
        JobState::Reserved => pb::JobState::Reserved,
        JobState::Finished => pb::JobState::Finished,
        JobState::Deleted => pb::JobState::Deleted,
        JobState::Dead => pb::JobState::Dead,
        JobState::Expired => pb::JobState::Expired,
    };
    state as i32
}

/// Returns a job as a consumer receives it: the fields of a REST pop.
pub(crate) fn reserved_job(mut job: Job) -> pb::ReservedJob {
    let group = job.show_as_job().map(String::from);
    pb::ReservedJob {
        id: job.id.into(),
        topic: job.topic.into(),
        subtopic: job.subtopic,
        body: job.body,
        attempt: job.attempt,
        run_at: epoch(job.run_at),
        ttr_ms: millis(job.ttr),
        priority: u32::from(job.priority),
        biz_key: job.biz_key,
        group,
    }
}

/// Returns a job with every field.
pub(crate) fn full_job(mut job: Job) -> pb::Job {
    let group = job.show_as_job().map(String::from);
    pb::Job {
        id: job.id.into(),
        topic: job.topic.into(),
        subtopic: job.subtopic,
        body: job.body,
        biz_key: job.biz_key,
        create_time: epoch(job.create_time),
        delay_ms: millis(job.delay),
        run_at: epoch(job.run_at),
        ttr_ms: millis(job.ttr),
        priority: u32::from(job.priority),
        max_retries: job.max_retries,
        retry_backoff_ms: job.retry_backoff.into_iter().map(millis).collect(),
        ttl_ms: millis(job.ttl),
        attempt: job.attempt,
        state: state(job.state),
        result: job.result,
        updated_at: epoch(job.updated_at),
        groups: job.groups.into_iter().map(String::from).collect(),
        group,
    }
}

/// Returns the job id and group of a job a nack returned (a group's delivery under its own id).
pub(crate) fn shown_id(mut job: Job) -> (String, Option<String>) {
    let group = job.show_as_job().map(String::from);
    (job.id.into(), group)
}

/// Returns one group's delivery of a job, as `GetJob` lists it.
pub(crate) fn delivery(delivery: Delivery) -> pb::Delivery {
    let job = delivery.details.job;
    pb::Delivery {
        group: delivery.group.into(),
        state: state(job.state),
        attempt: job.attempt,
        run_at: epoch(job.run_at),
        updated_at: epoch(job.updated_at),
        result: job.result,
        history: delivery.details.history.into_iter().map(history_entry).collect(),
    }
}

/// Returns one line of a job's history.
pub(crate) fn history_entry(entry: LogEntry) -> pb::HistoryEntry {
    pb::HistoryEntry { state: state(entry.state), attempt: entry.attempt, at: epoch(entry.at), node: entry.node }
}

fn add(counts: &mut pb::StateCounts, job_state: JobState, count: u64) {
    let slot = match job_state {
        JobState::Delay => &mut counts.delay,
        JobState::Ready => &mut counts.ready,
        JobState::Reserved => &mut counts.reserved,
        JobState::Finished => &mut counts.finished,
        JobState::Deleted => &mut counts.deleted,
        JobState::Dead => &mut counts.dead,
        JobState::Expired => &mut counts.expired,
    };
    *slot += count;
}

/// The counts of `Stats` per topic, and per topic and group for the groups' deliveries.
#[derive(Default)]
struct Counts {
    topics: BTreeMap<String, pb::StateCounts>,
    deliveries: BTreeMap<String, BTreeMap<String, pb::StateCounts>>,
}

impl Counts {
    /// Returns the counts of a topic, or of a group's deliveries when `topic`
    /// is the queue of one (`Topic::for_group`), shown by its topic and group.
    fn of(&mut self, topic: &Topic) -> &mut pb::StateCounts {
        match topic.group_parts() {
            Some((topic, group)) => self.deliveries.entry(topic.into()).or_default().entry(group.into()).or_default(),
            None => self.topics.entry(topic.to_string()).or_default(),
        }
    }
}

/// Returns the counts of `/stats`: live states from the scheduler (always
/// current), ended states from the store; per topic, per group's deliveries
/// and in total; with the declared groups.
pub(crate) fn stats_reply(stats: QueueStats, consumers: Vec<ConsumerView>, groups: &TopicGroups) -> pb::StatsReply {
    let mut counts = Counts::default();
    let mut totals = pb::StateCounts::default();
    for live in &stats.live {
        let topic = counts.of(&live.topic);
        for (job_state, count) in
            [(JobState::Delay, live.delay), (JobState::Ready, live.ready), (JobState::Reserved, live.reserved)]
        {
            add(topic, job_state, count);
            add(&mut totals, job_state, count);
        }
    }
    for stored in stats.stored.iter().filter(|stored| stored.state.is_terminal()) {
        add(counts.of(&stored.topic), stored.state, stored.count);
        add(&mut totals, stored.state, stored.count);
    }
    let deliveries = counts
        .deliveries
        .into_iter()
        .map(|(topic, groups)| (topic, pb::GroupCounts { groups: groups.into_iter().collect() }));
    pb::StatsReply {
        topics: counts.topics.into_iter().collect(),
        totals: Some(totals),
        scheduler: stats.scheduler.to_owned(),
        store: stats.store.to_owned(),
        consumers: consumers.into_iter().map(consumer_entry).collect(),
        groups: groups.iter().map(|(topic, names)| (topic.to_string(), group_list(names))).collect(),
        deliveries: deliveries.collect(),
    }
}

/// Returns groups by name, sorted.
pub(crate) fn group_list(groups: &[Group]) -> pb::GroupList {
    let mut names: Vec<String> = groups.iter().map(ToString::to_string).collect();
    names.sort();
    pb::GroupList { groups: names }
}

#[cfg(test)]
mod tests {
    use delayq_common::ErrorKind;
    use tonic::Code;

    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    fn refusal(request: pb::PushRequest) -> (ErrorKind, String) {
        match parse_push(&request, &Limits::default(), NOW) {
            Ok(parsed) => panic!("accepted: {parsed:?}"),
            Err(invalid) => (invalid.kind(), invalid.to_string()),
        }
    }

    fn push(topic: &str, body: &str) -> pb::PushRequest {
        pb::PushRequest { topic: topic.into(), body: Some(body.into()), ..pb::PushRequest::default() }
    }

    #[test]
    fn pushes_are_refused_with_the_rest_messages() {
        assert_eq!(refusal(push("", "b")).1, "topic is required");
        assert_eq!(refusal(pb::PushRequest { topic: "t".into(), ..Default::default() }).1, "body is required");
        assert_eq!(refusal(push("a b", "b")).1, "topic may only contain A-Z a-z 0-9 . _ : -");
        assert_eq!(refusal(pb::PushRequest { delay_ms: Some(-1), ..push("t", "b") }).1, "delay must be >= 0");
        assert_eq!(
            refusal(pb::PushRequest { delay_ms: Some(1), run_at: Some(5), ..push("t", "b") }).1,
            "runAt must not be given together with delay"
        );
        assert_eq!(
            refusal(pb::PushRequest { ttr_ms: Some(99), ..push("t", "b") }).1,
            "ttr must be from 100 ms to 86400000 ms"
        );
        assert_eq!(refusal(pb::PushRequest { priority: Some(5), ..push("t", "b") }).1, "priority must be from 0 to 4");
        assert_eq!(refusal(pb::PushRequest { id: Some(String::new()), ..push("t", "b") }).1, "id must not be empty");
        assert_eq!(
            refusal(pb::PushRequest { retry_backoff_ms: vec![1, -1], ..push("t", "b") }).1,
            "retryBackoff entries must be integers >= 0"
        );
        let too_big = refusal(push("t", &"x".repeat(65_537)));
        assert_eq!(too_big, (ErrorKind::TooLarge, "body must be at most 65536 bytes".to_owned()));
    }

    #[test]
    fn every_field_reaches_the_push() {
        let request = pb::PushRequest {
            id: Some("order-1".into()),
            create_time: Some(5_000),
            delay_ms: Some(1_000),
            ttr_ms: Some(2_000),
            priority: Some(0),
            max_retries: Some(3),
            retry_backoff_ms: vec![100, 200],
            ttl_ms: Some(7_000),
            subtopic: Some("eu".into()),
            biz_key: Some("k".into()),
            replace: true,
            groups: vec!["b".into(), "a".into()],
            ..push("t", "")
        };
        let parsed = parse_push(&request, &Limits::default(), NOW).map_err(|invalid| invalid.to_string());
        let Ok(parsed) = parsed else { panic!("{parsed:?}") };
        assert_eq!(parsed.run_at(NOW), Timestamp::from_millis(6_000));
        assert_eq!(parsed.ttr, Some(Duration::from_millis(2_000)));
        assert_eq!((parsed.priority, parsed.max_retries), (Some(0), Some(3)));
        assert_eq!(parsed.retry_backoff, vec![Duration::from_millis(100), Duration::from_millis(200)]);
        assert_eq!(parsed.ttl, Duration::from_millis(7_000));
        assert_eq!((parsed.subtopic.as_deref(), parsed.biz_key.as_deref()), (Some("eu"), Some("k")));
        assert!(parsed.replace);
        assert_eq!(parsed.body, "");
        assert_eq!(parsed.groups.iter().map(Group::as_str).collect::<Vec<_>>(), ["a", "b"]);
        let refused = refusal(pb::PushRequest { groups: vec!["a/b".into()], ..push("t", "b") });
        assert_eq!(refused.1, "groups may only contain A-Z a-z 0-9 . _ : -");
    }

    #[test]
    fn a_delivery_is_shown_with_the_id_and_topic_of_its_job_and_its_group() {
        let topic = delayq_testkit::topic("orders");
        let job = delayq_testkit::job("order-7", &topic, NOW);
        let Ok(group) = Group::parse("billing") else { panic!("valid group") };
        let delivery = Job { id: job.id.for_group(&group), topic: topic.for_group(&group), ..job.clone() };
        let reserved = reserved_job(delivery.clone());
        assert_eq!((reserved.id.as_str(), reserved.topic.as_str()), ("order-7", "orders"));
        assert_eq!(reserved.group.as_deref(), Some("billing"));
        let full = full_job(delivery);
        assert_eq!(
            (full.id.as_str(), full.topic.as_str(), full.group.as_deref()),
            ("order-7", "orders", Some("billing"))
        );
        assert_eq!(reserved_job(job).group, None);
    }

    #[test]
    fn parameters_follow_the_rest_rules() {
        let code_and_message = |status: Status| (status.code(), status.message().to_owned());
        assert_eq!(job_id("").map_err(code_and_message), Err((Code::InvalidArgument, "jobId is required".into())));
        assert_eq!(
            job_id("a b").map_err(code_and_message),
            Err((Code::InvalidArgument, "jobId may only contain A-Z a-z 0-9 . _ : -".into()))
        );
        assert_eq!(
            optional_job_id_named("id", "a b").map_err(code_and_message),
            Err((Code::InvalidArgument, "id may only contain A-Z a-z 0-9 . _ : -".into()))
        );
        assert_eq!(integer_in("count", None, 1, 100, 1).ok(), Some(1));
        assert_eq!(integer_in("count", Some(100), 1, 100, 1).ok(), Some(100));
        for bad in [0, -3, 101] {
            let refused = integer_in("count", Some(bad), 1, 100, 1).map_err(code_and_message);
            assert_eq!(refused, Err((Code::InvalidArgument, "count must be from 1 to 100".into())));
        }
        let negative = optional_millis("delay", Some(-1)).map_err(code_and_message);
        assert_eq!(negative, Err((Code::InvalidArgument, "delay must be >= 0".into())));
    }
}
