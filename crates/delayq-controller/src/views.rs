//! The JSON shapes of `data`: what each endpoint shows of a job.

use delayq_common::{Group, Job, JobId, JobState, Timestamp};
use delayq_queue::{Delivery, JobDetails, Pushed};
use delayq_store::{ListCursor, LogEntry};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::schemas::{JobSchema, JobStateSchema};

/// `{"id", "runAt"}`: the answer to a push.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PushedView {
    /// The job's id, generated when the push gave none.
    id: String,
    /// The due time (epoch ms).
    run_at: u64,
}

impl From<Pushed> for PushedView {
    /// A group's delivery (a retried dead one, say) shows as its job's id.
    fn from(pushed: Pushed) -> PushedView {
        let id = pushed.id.group_parts().map_or(pushed.id, |(job, _)| job);
        PushedView { id: id.to_string(), run_at: pushed.run_at.as_millis() }
    }
}

/// `{"id"}`: the answer to finish, touch, delete and restoreJob; with the
/// `group` the call named, when it named one.
#[derive(Serialize, ToSchema)]
pub(crate) struct IdView {
    /// The job's id.
    id: String,
    /// The group whose delivery the call acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
}

impl IdView {
    pub(crate) fn of(id: &JobId) -> IdView {
        IdView { id: id.to_string(), group: None }
    }

    /// The answer about `group`'s delivery of job `id` (the job itself without a group).
    pub(crate) fn of_delivery(id: &JobId, group: Option<&Group>) -> IdView {
        IdView { id: id.to_string(), group: group.map(Group::to_string) }
    }
}

/// `{"id", "runAt", "state"}`: the answer to a nack (`state` is `dead` when
/// out of retries), with the `group` of a group's delivery.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NackedView {
    /// The job's id.
    id: String,
    /// The group whose delivery was given back.
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    /// When it will be delivered again (epoch ms); unchanged when it is `dead`.
    run_at: u64,
    /// `delay` or `ready` when it will be delivered again, `dead` when it was out of retries.
    #[schema(value_type = JobStateSchema)]
    state: JobState,
}

impl From<Job> for NackedView {
    fn from(mut job: Job) -> NackedView {
        let group = job.show_as_job().map(String::from);
        NackedView { id: job.id.to_string(), group, run_at: job.run_at.as_millis(), state: job.state }
    }
}

/// A job as a consumer receives it from a pop: exactly these fields, and
/// `group` when it is a group's delivery.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PoppedJob {
    /// The job's id.
    id: String,
    /// The topic.
    topic: String,
    /// The consumer group this delivery is for; absent on a topic without groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    /// Routing key or Kafka key, as pushed.
    subtopic: Option<String>,
    /// The payload, as pushed.
    body: String,
    /// The number of this delivery, from 1.
    attempt: u32,
    /// The due time of this delivery (epoch ms).
    run_at: u64,
    /// Time to run, in ms: finish the job within it or it is delivered again.
    ttr: u64,
    /// 0 (most urgent) to 4.
    priority: u8,
    /// The business key, as pushed.
    biz_key: Option<String>,
}

impl From<Job> for PoppedJob {
    fn from(mut job: Job) -> PoppedJob {
        let group = job.show_as_job().map(String::from);
        PoppedJob {
            id: job.id.into(),
            topic: job.topic.into(),
            group,
            subtopic: job.subtopic,
            body: job.body,
            attempt: job.attempt,
            run_at: job.run_at.as_millis(),
            ttr: job.ttr.as_millis() as u64,
            priority: job.priority,
            biz_key: job.biz_key,
        }
    }
}

/// One line of a job's history.
#[derive(Serialize, ToSchema)]
#[schema(as = History)]
pub(crate) struct HistoryView {
    /// The state the job entered.
    #[schema(value_type = JobStateSchema)]
    state: JobState,
    /// The delivery it was at.
    attempt: u32,
    /// When (epoch ms).
    at: u64,
    /// The node that made the change.
    node: String,
}

impl From<LogEntry> for HistoryView {
    fn from(entry: LogEntry) -> HistoryView {
        HistoryView { state: entry.state, attempt: entry.attempt, at: entry.at.as_millis(), node: entry.node }
    }
}

/// A job with every field and its history, as `GET /jobs/{id}` shows it; a
/// group's delivery (`?group=`) with its `group`, a job of a topic with
/// groups with its `deliveries`.
#[derive(Serialize, ToSchema)]
pub(crate) struct JobView {
    #[serde(flatten)]
    job: ListedJob,
    /// The newest state changes, oldest first.
    history: Vec<HistoryView>,
    /// Each group's delivery of the job, by group; absent when it has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    deliveries: Vec<DeliveryView>,
}

impl From<JobDetails> for JobView {
    fn from(details: JobDetails) -> JobView {
        JobView {
            job: ListedJob::from(details.job),
            history: details.history.into_iter().map(HistoryView::from).collect(),
            deliveries: details.deliveries.into_iter().map(DeliveryView::from).collect(),
        }
    }
}

/// A job with every field, and the `group` of a group's delivery.
#[derive(Serialize, ToSchema)]
#[schema(as = ListedJob)]
pub(crate) struct ListedJob {
    #[serde(flatten)]
    #[schema(value_type = JobSchema)]
    job: Job,
    /// The consumer group this delivery is for; absent for a job itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
}

impl From<Job> for ListedJob {
    fn from(mut job: Job) -> ListedJob {
        let group = job.show_as_job().map(String::from);
        ListedJob { job, group }
    }
}

/// One group's delivery of a job, as `GET /jobs/{id}` lists it: what differs
/// from the job (the rest it shares with it).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Delivery)]
pub(crate) struct DeliveryView {
    /// The group.
    group: String,
    /// The delivery's state.
    #[schema(value_type = JobStateSchema)]
    state: JobState,
    /// The number of its current (or next) delivery to the group, from 1.
    attempt: u32,
    /// Its current due time (epoch ms), moved by nacks and redeliveries.
    run_at: u64,
    /// When its state last changed (epoch ms).
    updated_at: u64,
    /// What `/finish` stored for it.
    result: Option<String>,
    /// Its newest state changes, oldest first.
    history: Vec<HistoryView>,
}

impl From<Delivery> for DeliveryView {
    fn from(delivery: Delivery) -> DeliveryView {
        let job = delivery.details.job;
        DeliveryView {
            group: delivery.group.into(),
            state: job.state,
            attempt: job.attempt,
            run_at: job.run_at.as_millis(),
            updated_at: job.updated_at.as_millis(),
            result: job.result,
            history: delivery.details.history.into_iter().map(HistoryView::from).collect(),
        }
    }
}

/// `{"jobs", "cursor"}`: one page of a listing; `cursor` is null on the last page.
#[derive(Serialize, ToSchema)]
pub(crate) struct PageView {
    /// The jobs, in due-time order, then by id, without their history.
    jobs: Vec<ListedJob>,
    /// Set when the page is full: pass it back for the next page.
    cursor: Option<String>,
}

impl PageView {
    pub(crate) fn new(jobs: Vec<Job>, next: Option<ListCursor>) -> PageView {
        PageView { jobs: jobs.into_iter().map(ListedJob::from).collect(), cursor: next.as_ref().map(encode_cursor) }
    }
}

/// Encodes a listing position as the opaque string `"{runAt}:{id}"`; in a
/// listing of a group's deliveries, the id of the job.
pub(crate) fn encode_cursor(cursor: &ListCursor) -> String {
    let id = cursor.id.group_parts().map_or_else(|| cursor.id.clone(), |(job, _)| job);
    format!("{}:{id}", cursor.run_at.as_millis())
}

/// Parses a cursor made by [`encode_cursor`], of a listing of `group`'s
/// deliveries when given.
pub(crate) fn decode_cursor(text: &str, group: Option<&Group>) -> Result<ListCursor, ApiError> {
    let invalid = || ApiError::invalid("cursor is not valid; pass back the cursor of the previous page");
    // Ids may contain ':' themselves; the due time never does.
    let (run_at, id) = text.split_once(':').ok_or_else(invalid)?;
    let run_at = run_at.parse::<u64>().map_err(|_| invalid())?;
    let id = JobId::parse(id).map_err(|_| invalid())?;
    let id = group.map_or_else(|| id.clone(), |group| id.for_group(group));
    Ok(ListCursor { run_at: Timestamp::from_millis(run_at), id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_ids_with_colons() {
        let Ok(id) = JobId::parse("order:1") else { panic!("valid id") };
        let cursor = ListCursor { run_at: Timestamp::from_millis(42), id };
        assert_eq!(encode_cursor(&cursor), "42:order:1");
        assert_eq!(decode_cursor("42:order:1", None), Ok(cursor));
    }

    #[test]
    fn garbage_cursors_are_refused() {
        for garbage in ["", "42", "x:1", "42:", "42:a b", "-1:a", "42:a/b"] {
            assert!(decode_cursor(garbage, None).is_err(), "{garbage:?}");
        }
    }

    fn group(name: &str) -> Group {
        Group::parse(name).unwrap_or_else(|invalid| panic!("{invalid}"))
    }

    #[test]
    fn cursors_of_a_group_listing_name_the_job() {
        let Ok(id) = JobId::parse("order:1") else { panic!("valid id") };
        let billing = group("billing");
        let cursor = ListCursor { run_at: Timestamp::from_millis(42), id: id.for_group(&billing) };
        assert_eq!(encode_cursor(&cursor), "42:order:1");
        assert_eq!(decode_cursor("42:order:1", Some(&billing)), Ok(cursor));
    }

    #[test]
    fn a_delivery_is_shown_with_the_id_and_topic_of_its_job_and_its_group() {
        let topic = delayq_testkit::topic("orders");
        let job = delayq_testkit::job("order-7", &topic, Timestamp::from_millis(5));
        let billing = group("billing");
        let delivery = Job { id: job.id.for_group(&billing), topic: topic.for_group(&billing), ..job.clone() };
        let Ok(popped) = serde_json::to_value(PoppedJob::from(delivery.clone())) else { panic!("serializes") };
        assert_eq!(
            (&popped["id"], &popped["topic"], &popped["group"]),
            (&"order-7".into(), &"orders".into(), &"billing".into())
        );
        let Ok(listed) = serde_json::to_value(ListedJob::from(delivery)) else { panic!("serializes") };
        assert_eq!(
            (&listed["id"], &listed["topic"], &listed["group"]),
            (&"order-7".into(), &"orders".into(), &"billing".into())
        );
        let Ok(plain) = serde_json::to_value(PoppedJob::from(job)) else { panic!("serializes") };
        assert!(plain.get("group").is_none(), "{plain}");
    }
}
