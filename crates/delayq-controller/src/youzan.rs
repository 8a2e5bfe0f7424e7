//! The Youzan-style aliases: `POST|GET /topic/{topic}/job` and
//! `DELETE|PUT /topic/{topic}/job/{id}`. Same semantics as the main routes,
//! but `delay`, `ttr` and the pop `timeout` are in **seconds**, as those
//! clients send them.

use std::time::Duration;

use axum::extract::State;
use delayq_common::{ErrorKind, JobId, TimeUnit, Topic};
use delayq_queue::service::MAX_POP_WAIT;
use serde_json::Value;

use crate::app::AppState;
use crate::error::{ok, ApiError, ApiResult, Envelope};
use crate::extract::{parse_job_id, ApiPath, JsonObject, OptionalJsonObject, Params};
use crate::jobs::{finish_job, finish_result, parse_push};
use crate::params::{TopicJobPath, TopicPath, YouzanPopQuery};
use crate::schemas::{FinishBody, Refusal, YouzanPushBody};
use crate::views::{IdView, PoppedJob, PushedView};

/// `POST /topic/{topic}/job`: push into the path's topic.
///
/// The body may leave `topic` out; when it names one, it must be the path's.
#[utoipa::path(
    post,
    path = "/topic/{topic}/job",
    tag = "youzan",
    operation_id = "youzan_push",
    params(TopicPath),
    request_body = YouzanPushBody,
    responses(
        (status = 200, description = "stored and scheduled", body = Envelope<'static, PushedView>),
        (status = 400, description = "an invalid topic, a body topic other than the path's, or an invalid field",
            body = Refusal),
        (status = 409, description = "the id or the business key belongs to a live job", body = Refusal),
        (status = 413, description = "`body` over `limits.max_body_bytes`, or the request body over the route \
            limit", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn push(
    State(state): State<AppState>,
    ApiPath(topic): ApiPath<String>,
    JsonObject(mut fields): JsonObject,
) -> ApiResult {
    let topic = Topic::parse(topic)?;
    match fields.get("topic") {
        None | Some(Value::Null) => {
            fields.insert("topic".to_owned(), Value::String(topic.to_string()));
        }
        Some(Value::String(given)) if given == topic.as_str() => {}
        Some(_) => return Err(ApiError::invalid("topic must match the topic of the path")),
    }
    let request = parse_push(&state, Value::Object(fields), TimeUnit::Seconds)?;
    let pushed = state.queue.push(request).await?;
    ok(PushedView::from(pushed))
}

/// `GET /topic/{topic}/job?timeout=`: pops one job.
///
/// `data` is the job itself (the `/pop` fields, `ttr` in milliseconds), or
/// `null` when none was ready within `timeout` seconds (0–30, default 0):
/// Youzan clients expect a single job, not an array.
#[utoipa::path(
    get,
    path = "/topic/{topic}/job",
    tag = "youzan",
    operation_id = "youzan_pop",
    params(TopicPath, YouzanPopQuery),
    responses(
        (status = 200, description = "the reserved job, or `null`", body = Envelope<'static, Option<PoppedJob>>),
        (status = 400, description = "an invalid topic, `timeout` out of range", body = Refusal),
        (status = 503, description = "too many consumers are waiting, or the scheduler is unavailable",
            body = Refusal),
    )
)]
pub(crate) async fn pop(State(state): State<AppState>, ApiPath(topic): ApiPath<String>, params: Params) -> ApiResult {
    let topic = Topic::parse(topic)?;
    let timeout_secs = params.integer_in("timeout", 0, MAX_POP_WAIT.as_secs(), 0)?;
    let mut jobs = state.queue.pop(&topic, 1, Duration::from_secs(timeout_secs)).await?;
    ok(jobs.pop().map(PoppedJob::from))
}

/// `DELETE /topic/{topic}/job/{id}`: cancels a live job of the topic.
#[utoipa::path(
    delete,
    path = "/topic/{topic}/job/{id}",
    tag = "youzan",
    operation_id = "youzan_delete",
    params(TopicJobPath),
    responses(
        (status = 200, description = "deleted", body = Envelope<'static, IdView>),
        (status = 400, description = "an invalid topic or id", body = Refusal),
        (status = 404, description = "no job has this id, or it belongs to another topic", body = Refusal),
        (status = 409, description = "the job has ended", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    ApiPath((topic, id)): ApiPath<(String, String)>,
) -> ApiResult {
    let id = job_of_topic(&state, &topic, &id).await?;
    state.queue.delete(&id).await?;
    ok(IdView::of(&id))
}

/// `PUT /topic/{topic}/job/{id}`: finishes a reserved job of the topic,
/// with an optional `{"result"}` body.
#[utoipa::path(
    put,
    path = "/topic/{topic}/job/{id}",
    tag = "youzan",
    operation_id = "youzan_finish",
    params(TopicJobPath),
    request_body(content = Option<FinishBody>, description = "empty, or an object with the `result` to store"),
    responses(
        (status = 200, description = "finished", body = Envelope<'static, IdView>),
        (status = 400, description = "an invalid topic or id, a body that is not a JSON object, `result` not a \
            string", body = Refusal),
        (status = 404, description = "no job has this id, or it belongs to another topic", body = Refusal),
        (status = 409, description = "the job has ended, or is live but not reserved", body = Refusal),
        (status = 413, description = "`result` over `limits.max_result_bytes`", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn finish(
    State(state): State<AppState>,
    ApiPath((topic, id)): ApiPath<(String, String)>,
    OptionalJsonObject(fields): OptionalJsonObject,
) -> ApiResult {
    let id = job_of_topic(&state, &topic, &id).await?;
    let result = finish_result(&state, fields)?;
    finish_job(&state, &id, None, None, result).await
}

/// Validates the path and checks that the job belongs to the path's topic,
/// so a client cannot act on another topic's job by id.
async fn job_of_topic(state: &AppState, topic: &str, id: &str) -> Result<JobId, ApiError> {
    let topic = Topic::parse(topic)?;
    let id = parse_job_id("id", id)?;
    let details = state.queue.get(&id).await?;
    if details.job.topic != topic {
        return Err(ApiError::new(ErrorKind::NotFound, format!("no job {id} in topic {topic}")));
    }
    if details.job.state.is_terminal() {
        return Err(ApiError::new(ErrorKind::Conflict, format!("job {id} is {}", details.job.state)));
    }
    Ok(id)
}
