//! The job endpoints: push, batch push, pop, finish, nack, touch, delete and lookups.

use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use delayq_common::{ErrorKind, Group, InvalidField, JobId, Limits, PushRequest, TimeUnit, Timestamp};
use delayq_queue::service::{DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT, MAX_POP_COUNT, MAX_POP_WAIT};
use delayq_queue::{JobDetails, Pushed, QueueError, QueueResult};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::app::AppState;
use crate::batch::parse_batch;
use crate::consumers::{consumer_of, group_of};
use crate::error::{ok, ApiError, ApiResult, Envelope};
use crate::extract::{parse_job_id, ApiPath, JsonObject, OptionalJsonObject, Params, RawBody};
use crate::params::{
    AttemptQuery, DeleteQuery, FindQuery, GroupQuery, HistoryQuery, JobIdQuery, JobPath, NackQuery, PopQuery,
};
use crate::schemas::{BatchBody, FinishBody, PushBody, Refusal};
use crate::views::{decode_cursor, IdView, JobView, NackedView, PageView, PoppedJob, PushedView};

/// The default page size of `GET /jobs`.
const DEFAULT_LIST_LIMIT: u64 = 100;
/// The largest page size of `GET /jobs`.
const MAX_LIST_LIMIT: u64 = 1000;

/// `POST /push`: adds one job (or replaces a waiting one).
///
/// The job is committed to the store before the answer.
#[utoipa::path(
    post,
    path = "/push",
    tag = "jobs",
    request_body = PushBody,
    responses(
        (status = 200, description = "stored and scheduled (or, with `replace`, updated)",
            body = Envelope<'static, PushedView>),
        (status = 400, description = "no body, not a JSON object, or a field is invalid (the message names it)",
            body = Refusal),
        (status = 409, description = "the id or the business key belongs to a live job; a `replace` of a reserved \
            job or across topics", body = Refusal),
        (status = 413, description = "`body` over `limits.max_body_bytes`, or the request body over the route \
            limit", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
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
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum BatchItem {
    Pushed(PushedView),
    Refused {
        /// The message a single push would have given.
        error: String,
    },
}

/// `POST /push/batch`: `{"jobs": [...]}`, each job judged alone; answers in order.
///
/// `data` has one entry per job, in order: `{"id", "runAt"}` when it was pushed, else `{"error"}`.
#[utoipa::path(
    post,
    path = "/push/batch",
    tag = "jobs",
    request_body = BatchBody,
    responses(
        (status = 200, description = "the batch was read; each entry carries its own outcome",
            body = Envelope<'static, Vec<BatchItem>>),
        (status = 400, description = "not a JSON object, `jobs` missing, not an array or over 1000 entries, or not \
            valid JSON", body = Refusal),
        (status = 413, description = "the request body over the route limit", body = Refusal),
        (status = 503, description = "a backend failed and no entry got in", body = Refusal),
    )
)]
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

/// `GET|POST /pop?topic=&group=&count=&timeout=`: reserves up to `count`
/// ready jobs (of a topic with groups, `group`'s deliveries).
///
/// Lower `priority` numbers come first, then earlier due times.
#[utoipa::path(
    method(get, post),
    path = "/pop",
    tag = "jobs",
    params(PopQuery),
    responses(
        (status = 200, description = "the reserved jobs; empty when none was ready in time",
            body = Envelope<'static, Vec<PoppedJob>>),
        (status = 400, description = "`topic` missing or invalid, `count` or `timeout` out of range, `group` \
            invalid, or missing on a topic with groups", body = Refusal),
        (status = 503, description = "too many consumers are waiting (a pop with a `timeout`), the scheduler is \
            unavailable, or the store's journal is full", body = Refusal),
    )
)]
pub(crate) async fn pop(State(state): State<AppState>, headers: HeaderMap, params: Params) -> ApiResult {
    let topic = params.topic()?;
    let count = params.integer_in("count", 1, MAX_POP_COUNT as u64, 1)?;
    let max_wait_ms = MAX_POP_WAIT.as_millis() as u64;
    let timeout_ms = params.integer_in("timeout", 0, max_wait_ms, 0)?;
    let consumer = consumer_of(&params, &headers)?;
    let group = group_of(&params)?;
    let wait = Duration::from_millis(timeout_ms);
    let jobs = state.queue.pop_for(consumer.as_ref(), &topic, group.as_ref(), count as usize, wait).await?;
    ok(jobs.into_iter().map(PoppedJob::from).collect::<Vec<_>>())
}

/// `POST /finish?jobId=&group=&attempt=`: acknowledges a reserved job (or
/// `group`'s delivery of it), with an optional `{"result"}`.
#[utoipa::path(
    post,
    path = "/finish",
    tag = "jobs",
    params(JobIdQuery, GroupQuery, AttemptQuery),
    request_body(content = Option<FinishBody>, description = "empty, or an object with the `result` to store"),
    responses(
        (status = 200, description = "finished", body = Envelope<'static, IdView>),
        (status = 400, description = "`jobId` missing or invalid, `group` invalid, `attempt` out of range, a body \
            that is not a JSON object, `result` not a string", body = Refusal),
        (status = 404, description = "no job has this id", body = Refusal),
        (status = 409, description = "the job (or its delivery) is not reserved (an ended one names its state), \
            `attempt` names an older delivery, or the job has no delivery to `group`", body = Refusal),
        (status = 413, description = "`result` over `limits.max_result_bytes`; the job stays reserved",
            body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn finish(
    State(state): State<AppState>,
    params: Params,
    OptionalJsonObject(fields): OptionalJsonObject,
) -> ApiResult {
    let id = params.job_id()?;
    let group = group_of(&params)?;
    let attempt = params.optional_attempt()?;
    let result = finish_result(&state, fields)?;
    finish_job(&state, &id, group.as_ref(), attempt, result).await
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

/// Finishes a job, or `group`'s delivery of it (of delivery `attempt` when
/// given), saying "not reserved" when it is in another state.
pub(crate) async fn finish_job(
    state: &AppState,
    id: &JobId,
    group: Option<&Group>,
    attempt: Option<u32>,
    result: Option<String>,
) -> ApiResult {
    let queue = &state.queue;
    queue
        .on_delivery(id, group, |delivery| async move { queue.finish(&delivery, attempt, result).await })
        .await
        .map_err(not_reserved)?;
    ok(IdView::of_delivery(id, group))
}

/// `POST /nack?jobId=&group=&delay=&attempt=`: gives a reserved job (or
/// `group`'s delivery of it) back for a retry.
///
/// The job gets `attempt` + 1 and falls due after `delay`; out of retries, it becomes `dead`.
#[utoipa::path(
    post,
    path = "/nack",
    tag = "jobs",
    params(JobIdQuery, GroupQuery, NackQuery, AttemptQuery),
    responses(
        (status = 200, description = "given back, or dead when out of retries", body = Envelope<'static, NackedView>),
        (status = 400, description = "`jobId` missing or invalid, `group`, `attempt` or `delay` invalid",
            body = Refusal),
        (status = 404, description = "no job has this id", body = Refusal),
        (status = 409, description = "the job (or its delivery) is not reserved, `attempt` names an older \
            delivery, or the job has no delivery to `group`", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn nack(State(state): State<AppState>, params: Params) -> ApiResult {
    let id = params.job_id()?;
    let group = group_of(&params)?;
    let attempt = params.optional_attempt()?;
    let delay = params.optional_millis("delay")?;
    let queue = &state.queue;
    let job = queue
        .on_delivery(&id, group.as_ref(), |delivery| async move { queue.nack(&delivery, attempt, delay).await })
        .await
        .map_err(not_reserved)?;
    ok(NackedView::from(job))
}

/// `POST /touch?jobId=&group=&attempt=`: restarts the ttr clock of a reserved
/// job (or of `group`'s delivery of it).
#[utoipa::path(
    post,
    path = "/touch",
    tag = "jobs",
    params(JobIdQuery, GroupQuery, AttemptQuery),
    responses(
        (status = 200, description = "the deadline is now + `ttr`", body = Envelope<'static, IdView>),
        (status = 400, description = "`jobId` missing or invalid, `group` or `attempt` invalid", body = Refusal),
        (status = 404, description = "no job has this id", body = Refusal),
        (status = 409, description = "the job (or its delivery) is not reserved, `attempt` names an older \
            delivery, or the job has no delivery to `group`", body = Refusal),
        (status = 503, description = "the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn touch(State(state): State<AppState>, params: Params) -> ApiResult {
    let id = params.job_id()?;
    let group = group_of(&params)?;
    let attempt = params.optional_attempt()?;
    let queue = &state.queue;
    queue
        .on_delivery(&id, group.as_ref(), |delivery| async move { queue.touch(&delivery, attempt).await })
        .await
        .map_err(not_reserved)?;
    ok(IdView::of_delivery(&id, group.as_ref()))
}

/// `GET|POST /delete?jobId=` or `?topic=&bizKey=`: cancels a live job with
/// every group's delivery of it; with `group=`, that group's delivery alone.
///
/// The job becomes `deleted`; a consumer that holds it can no longer finish it.
#[utoipa::path(
    method(get, post),
    path = "/delete",
    tag = "jobs",
    params(DeleteQuery),
    responses(
        (status = 200, description = "deleted", body = Envelope<'static, IdView>),
        (status = 400, description = "neither `jobId` nor `topic` and `bizKey`, or one of them (or `group`) \
            invalid", body = Refusal),
        (status = 404, description = "no job has this id, or no live job of the topic has this business key",
            body = Refusal),
        (status = 409, description = "the job (or its delivery) has ended, or the job has no delivery to `group`",
            body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
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
    let group = group_of(&params)?;
    let queue = &state.queue;
    queue.on_delivery(&id, group.as_ref(), |delivery| async move { queue.delete(&delivery).await }).await?;
    ok(IdView::of_delivery(&id, group.as_ref()))
}

/// `GET /jobs/{id}?historyLimit=&group=`: a job in any state (with each
/// group's delivery of it), or with `group` that group's delivery, with the
/// newest `historyLimit` lines of history (default 100, at most 1000), oldest first.
#[utoipa::path(
    get,
    path = "/jobs/{id}",
    tag = "jobs",
    params(JobPath, GroupQuery, HistoryQuery),
    responses(
        (status = 200, description = "found", body = Envelope<'static, JobView>),
        (status = 400, description = "an invalid id or `group`, `historyLimit` out of range", body = Refusal),
        (status = 404, description = "no job has this id (or it was purged)", body = Refusal),
        (status = 409, description = "the job has no delivery to `group`", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn get_job(State(state): State<AppState>, ApiPath(id): ApiPath<String>, params: Params) -> ApiResult {
    let id = parse_job_id("id", &id)?;
    let group = group_of(&params)?;
    let history_limit = history_limit(&params)?;
    let details = job_details(&state, &id, group.as_ref(), history_limit).await?;
    ok(JobView::from(details))
}

/// Looks up a job, or `group`'s delivery of it, with its history.
async fn job_details(
    state: &AppState,
    id: &JobId,
    group: Option<&Group>,
    history_limit: usize,
) -> Result<JobDetails, ApiError> {
    let queue = &state.queue;
    queue
        .on_delivery(id, group, |delivery| async move { queue.get_with_history(&delivery, history_limit).await })
        .await
        .map_err(|error| job_not_found(error, id))
}

/// Reads `historyLimit`: how many of the newest history lines a lookup shows.
fn history_limit(params: &Params) -> Result<usize, ApiError> {
    let limit = params.integer_in("historyLimit", 0, MAX_HISTORY_LIMIT as u64, DEFAULT_HISTORY_LIMIT as u64)?;
    Ok(usize::try_from(limit).unwrap_or(MAX_HISTORY_LIMIT))
}

/// What `GET /jobs` finds: a job by business key, or a page of a listing.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant, reason = "built for one answer and serialized at once, never stored")]
enum Found {
    Job(JobView),
    Page(PageView),
}

/// `GET /jobs?topic=&bizKey=` (one job) or `GET /jobs?topic=&state=&limit=&cursor=` (a page).
///
/// By business key: the live job of the topic that holds it, with its newest 100 history
/// lines. By state: a page of the topic's jobs in due-time order, then by id. With
/// `group`: that group's delivery of the job, or a page of the group's deliveries.
#[utoipa::path(
    get,
    path = "/jobs",
    tag = "jobs",
    params(FindQuery),
    responses(
        (status = 200, description = "the job, or a page whose `cursor` leads to the next",
            body = Envelope<'static, Found>),
        (status = 400, description = "`topic` missing, `state` missing or unknown, `limit` out of range, an \
            invalid `cursor` or `group`", body = Refusal),
        (status = 404, description = "by business key only: no live job of the topic holds it", body = Refusal),
        (status = 409, description = "by business key only: the job has no delivery to `group`", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn find(State(state): State<AppState>, params: Params) -> ApiResult {
    let topic = params.topic()?;
    let group = group_of(&params)?;
    if let Some(biz_key) = params.get("bizKey") {
        let id = state.queue.resolve_biz_key(&topic, biz_key).await?;
        let details = job_details(&state, &id, group.as_ref(), DEFAULT_HISTORY_LIMIT).await?;
        return ok(Found::Job(JobView::from(details)));
    }
    let Some(job_state) = params.state()? else {
        return Err(ApiError::invalid("state is required (or bizKey)"));
    };
    let limit = params.integer_in("limit", 1, MAX_LIST_LIMIT, DEFAULT_LIST_LIMIT)?;
    let cursor = params.get("cursor").map(|text| decode_cursor(text, group.as_ref())).transpose()?;
    let listed = group.as_ref().map_or_else(|| topic.clone(), |group| topic.for_group(group));
    let page = state.queue.list(&listed, job_state, limit as usize, cursor).await?;
    ok(Found::Page(PageView::new(page.jobs, page.next)))
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
