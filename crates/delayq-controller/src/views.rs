//! The JSON shapes of `data`: what each endpoint shows of a job.

use delayq_common::{Job, JobId, JobState, Timestamp};
use delayq_queue::{JobDetails, Pushed};
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
    fn from(pushed: Pushed) -> PushedView {
        PushedView { id: pushed.id.to_string(), run_at: pushed.run_at.as_millis() }
    }
}

/// `{"id"}`: the answer to finish, touch, delete and restoreJob.
#[derive(Serialize, ToSchema)]
pub(crate) struct IdView {
    /// The job's id.
    id: String,
}

impl IdView {
    pub(crate) fn of(id: &JobId) -> IdView {
        IdView { id: id.to_string() }
    }
}

/// `{"id", "runAt", "state"}`: the answer to a nack (`state` is `dead` when out of retries).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NackedView {
    /// The job's id.
    id: String,
    /// When it will be delivered again (epoch ms); unchanged when it is `dead`.
    run_at: u64,
    /// `delay` or `ready` when it will be delivered again, `dead` when it was out of retries.
    #[schema(value_type = JobStateSchema)]
    state: JobState,
}

impl From<Job> for NackedView {
    fn from(job: Job) -> NackedView {
        NackedView { id: job.id.to_string(), run_at: job.run_at.as_millis(), state: job.state }
    }
}

/// A job as a consumer receives it from a pop: exactly these fields.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PoppedJob {
    /// The job's id.
    id: String,
    /// The topic.
    topic: String,
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
    fn from(job: Job) -> PoppedJob {
        PoppedJob {
            id: job.id.into(),
            topic: job.topic.into(),
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

/// A job with every field and its history, as `GET /jobs/{id}` shows it.
#[derive(Serialize, ToSchema)]
pub(crate) struct JobView {
    #[serde(flatten)]
    #[schema(value_type = JobSchema)]
    job: Job,
    /// The newest state changes, oldest first.
    history: Vec<HistoryView>,
}

impl From<JobDetails> for JobView {
    fn from(details: JobDetails) -> JobView {
        JobView { job: details.job, history: details.history.into_iter().map(HistoryView::from).collect() }
    }
}

/// `{"jobs", "cursor"}`: one page of a listing; `cursor` is null on the last page.
#[derive(Serialize, ToSchema)]
pub(crate) struct PageView {
    /// The jobs, in due-time order, then by id, without their history.
    #[schema(value_type = Vec<JobSchema>)]
    jobs: Vec<Job>,
    /// Set when the page is full: pass it back for the next page.
    cursor: Option<String>,
}

impl PageView {
    pub(crate) fn new(jobs: Vec<Job>, next: Option<ListCursor>) -> PageView {
        PageView { jobs, cursor: next.as_ref().map(encode_cursor) }
    }
}

/// Encodes a listing position as the opaque string `"{runAt}:{id}"`.
pub(crate) fn encode_cursor(cursor: &ListCursor) -> String {
    format!("{}:{}", cursor.run_at.as_millis(), cursor.id)
}

/// Parses a cursor made by [`encode_cursor`].
pub(crate) fn decode_cursor(text: &str) -> Result<ListCursor, ApiError> {
    let invalid = || ApiError::invalid("cursor is not valid; pass back the cursor of the previous page");
    // Ids may contain ':' themselves; the due time never does.
    let (run_at, id) = text.split_once(':').ok_or_else(invalid)?;
    let run_at = run_at.parse::<u64>().map_err(|_| invalid())?;
    let id = JobId::parse(id).map_err(|_| invalid())?;
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
        assert_eq!(decode_cursor("42:order:1"), Ok(cursor));
    }

    #[test]
    fn garbage_cursors_are_refused() {
        for garbage in ["", "42", "x:1", "42:", "42:a b", "-1:a"] {
            assert!(decode_cursor(garbage).is_err(), "{garbage:?}");
        }
    }
}
