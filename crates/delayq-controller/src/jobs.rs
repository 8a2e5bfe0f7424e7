//! The job endpoints: push, batch push, pop, finish, nack, touch, delete and lookups.

use std::time::Duration;

use axum::extract::State;
use delayq_common::{ErrorKind, InvalidField, JobId, Limits, PushRequest, TimeUnit, Timestamp};
use delayq_queue::service::{DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT, MAX_POP_COUNT, MAX_POP_WAIT};
use delayq_queue::{Pushed, QueueError, QueueResult};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::app::AppState;
use crate::batch::parse_batch;
use crate::error::{ok, ApiError, ApiResult};
use crate::extract::{parse_job_id, ApiPath, JsonObject, OptionalJsonObject, Params, RawBody};
use crate::views::{decode_cursor, IdView, JobView, NackedView, PageView, PoppedJob, PushedView};

/// The default page size of `GET /jobs`.
const DEFAULT_LIST_LIMIT: u64 = 100;
/// The largest page size of `GET /jobs`.
const MAX_LIST_LIMIT: u64 = 1000;

/// `POST /push`: adds one job (or replaces a waiting one).
pub(crate) async fn push(State(state): State<AppState>, JsonObject(fields): JsonObject) -> ApiResult {
    let request = parse_push(&state, Value::Object(fields), TimeUnit::Millis)?;
    let pushed = state.queue.push(request).await?;
    ok(PushedView::from(pushed))
}

/// Validates one push given as a JSON value, in the given duration unit.
pub(crate) fn parse_push(state: &AppState, value: Value, unit: TimeUnit) -> Result<PushRequest, ApiError> {
    Ok(PushRequest::from_json(&value, unit, &limits(state), Timestamp::now())?)
}

fn limits(state: &AppState) -> Limits {
    state.queue.settings().limits
}

/// One entry of a batch answer: the pushed job or why it was refused.
#[derive(Serialize)]
#[serde(untagged)]
enum BatchItem {
    Pushed(PushedView),
    Refused { error: String },
}

/// `POST /push/batch`: `{"jobs": [...]}`, each job judged alone; answers in order.
pub(crate) async fn push_batch(State(state): State<AppState>, RawBody(body): RawBody) -> ApiResult {
    let requests = parse_batch(&body, &limits(&state), Timestamp::now())?;
    drop(body);
    let outcomes = state.queue.push_batch(requests).await?;
    let items: Vec<BatchItem> = outcomes.into_iter().map(batch_item).collect();
    ok(items)
}

fn batch_item(outcome: QueueResult<Pushed>) -> BatchItem {
    match outcome {
        Ok(pushed) => BatchItem::Pushed(pushed.into()),
        Err(error) => BatchItem::Refused { error: error.public_message() },
    }
}

/// `GET|POST /pop?topic=&count=&timeout=`: reserves up to `count` ready jobs.
pub(crate) async fn pop(State(state): State<AppState>, params: Params) -> ApiResult {
    let topic = params.topic()?;
    let count = params.integer_in("count", 1, MAX_POP_COUNT as u64, 1)?;
    let max_wait_ms = MAX_POP_WAIT.as_millis() as u64;
    let timeout_ms = params.integer_in("timeout", 0, max_wait_ms, 0)?;
    let jobs = state.queue.pop(&topic, count as usize, Duration::from_millis(timeout_ms)).await?;
    ok(jobs.into_iter().map(PoppedJob::from).collect::<Vec<_>>())
}

/// `POST /finish?jobId=&attempt=`: acknowledges a reserved job, with an optional `{"result"}`.
pub(crate) async fn finish(
    State(state): State<AppState>,
    params: Params,
    OptionalJsonObject(fields): OptionalJsonObject,
) -> ApiResult {
    let id = params.job_id()?;
    let attempt = params.optional_attempt()?;
    let result = finish_result(&state, fields)?;
    finish_job(&state, &id, attempt, result).await
}

/// Reads the optional `result` of a finish body: a string of at most
/// `max_result_bytes` bytes.
pub(crate) fn finish_result(state: &AppState, fields: Option<Map<String, Value>>) -> Result<Option<String>, ApiError> {
    let max_bytes = state.config.max_result_bytes;
    match fields.and_then(|mut fields| fields.remove("result")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(result)) if result.len() > max_bytes => {
            Err(InvalidField::too_large("result", format!("must be at most {max_bytes} bytes")).into())
        }
        Some(Value::String(result)) => Ok(Some(result)),
        Some(_) => Err(ApiError::invalid("result must be a string")),
    }
}

/// Finishes a job (of delivery `attempt` when given), saying "not reserved" when it is in another state.
pub(crate) async fn finish_job(
    state: &AppState,
    id: &JobId,
    attempt: Option<u32>,
    result: Option<String>,
) -> ApiResult {
    state.queue.finish(id, attempt, result).await.map_err(not_reserved)?;
    ok(IdView::of(id))
}

/// `POST /nack?jobId=&delay=&attempt=`: gives a reserved job back for a retry.
pub(crate) async fn nack(State(state): State<AppState>, params: Params) -> ApiResult {
    let id = params.job_id()?;
    let attempt = params.optional_attempt()?;
    let delay = params.optional_millis("delay")?;
    let job = state.queue.nack(&id, attempt, delay).await.map_err(not_reserved)?;
    ok(NackedView::from(job))
}

/// `POST /touch?jobId=&attempt=`: restarts the ttr clock of a reserved job.
pub(crate) async fn touch(State(state): State<AppState>, params: Params) -> ApiResult {
    let id = params.job_id()?;
    let attempt = params.optional_attempt()?;
    state.queue.touch(&id, attempt).await.map_err(not_reserved)?;
    ok(IdView::of(&id))
}

/// `GET|POST /delete?jobId=` or `?topic=&bizKey=`: cancels a live job.
pub(crate) async fn delete(State(state): State<AppState>, params: Params) -> ApiResult {
    let id = match params.optional_job_id()? {
        Some(id) => id,
        None if params.get("topic").is_some() || params.get("bizKey").is_some() => {
            let topic = params.topic()?;
            let biz_key = params.required("bizKey")?;
            state.queue.resolve_biz_key(&topic, biz_key).await?
        }
        None => return Err(ApiError::invalid("jobId is required (or topic and bizKey)")),
    };
    state.queue.delete(&id).await?;
    ok(IdView::of(&id))
}

/// `GET /jobs/{id}?historyLimit=`: a job in any state, with the newest
/// `historyLimit` lines of its history (default 100, at most 1000), oldest first.
pub(crate) async fn get_job(State(state): State<AppState>, ApiPath(id): ApiPath<String>, params: Params) -> ApiResult {
    let id = parse_job_id("id", &id)?;
    let history_limit = history_limit(&params)?;
    let details = state.queue.get_with_history(&id, history_limit).await.map_err(|error| job_not_found(error, &id))?;
    ok(JobView::from(details))
}

/// Reads `historyLimit`: how many of the newest history lines a lookup shows.
fn history_limit(params: &Params) -> Result<usize, ApiError> {
    let limit = params.integer_in("historyLimit", 0, MAX_HISTORY_LIMIT as u64, DEFAULT_HISTORY_LIMIT as u64)?;
    Ok(usize::try_from(limit).unwrap_or(MAX_HISTORY_LIMIT))
}

/// `GET /jobs?topic=&bizKey=` (one job) or `GET /jobs?topic=&state=&limit=&cursor=` (a page).
pub(crate) async fn find(State(state): State<AppState>, params: Params) -> ApiResult {
    let topic = params.topic()?;
    if let Some(biz_key) = params.get("bizKey") {
        let id = state.queue.resolve_biz_key(&topic, biz_key).await?;
        let details = state.queue.get(&id).await.map_err(|error| job_not_found(error, &id))?;
        return ok(JobView::from(details));
    }
    let Some(job_state) = params.state()? else {
        return Err(ApiError::invalid("state is required (or bizKey)"));
    };
    let limit = params.integer_in("limit", 1, MAX_LIST_LIMIT, DEFAULT_LIST_LIMIT)?;
    let cursor = params.get("cursor").map(decode_cursor).transpose()?;
    let page = state.queue.list(&topic, job_state, limit as usize, cursor).await?;
    ok(PageView::new(page.jobs, page.next))
}

/// Words a wrong-state refusal of finish, nack and touch as "not reserved".
fn not_reserved(error: QueueError) -> ApiError {
    match error {
        QueueError::WrongState { id, state } => {
            ApiError::new(ErrorKind::Conflict, QueueError::not_reserved_message(&id, state))
        }
        other => other.into(),
    }
}

/// Words a missing job of a lookup without the "live" of the queue's message.
fn job_not_found(error: QueueError, id: &JobId) -> ApiError {
    match error {
        QueueError::NotFound(_) => ApiError::new(ErrorKind::NotFound, QueueError::NotFound(id.clone()).to_string()),
        other => other.into(),
    }
}
