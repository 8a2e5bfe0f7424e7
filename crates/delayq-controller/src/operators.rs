//! What an operator does to jobs and topics: `POST /jobs/{id}/run` (a
//! delayed job due now), `POST /jobs/{id}/retry` (a dead job back to ready),
//! `POST /topics/{topic}/dead/retry` and `/dead/delete` (every dead job of a
//! topic), and `POST /topics/{topic}/pause` and `/resume`.

use axum::extract::State;
use delayq_common::Topic;
use serde::Serialize;
use utoipa::ToSchema;

use crate::app::AppState;
use crate::consumers::group_of;
use crate::error::{ok, ApiError, ApiResult, Envelope};
use crate::extract::{parse_job_id, ApiPath, Params};
use crate::params::{GroupQuery, JobPath, TopicPath};
use crate::schemas::Refusal;
use crate::views::PushedView;

/// `POST /jobs/{id}/run`: makes a delayed job due now; everything else about it stays.
#[utoipa::path(
    post,
    path = "/jobs/{id}/run",
    tag = "jobs",
    params(JobPath, GroupQuery),
    responses(
        (status = 200, description = "due now", body = Envelope<'static, PushedView>),
        (status = 400, description = "an invalid id", body = Refusal),
        (status = 404, description = "no job has this id (or it was purged)", body = Refusal),
        (status = 409, description = "the job is not delayed; the message names its state", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn run_now(State(state): State<AppState>, ApiPath(id): ApiPath<String>, params: Params) -> ApiResult {
    let id = parse_job_id("id", &id)?;
    let group = group_of(&params)?;
    let queue = &state.queue;
    ok(PushedView::from(queue.on_delivery(&id, group.as_ref(), |job| async move { queue.run_now(&job).await }).await?))
}

/// `POST /jobs/{id}/retry`: a dead job is ready again at once, its attempts
/// counted from 1, its history kept.
#[utoipa::path(
    post,
    path = "/jobs/{id}/retry",
    tag = "jobs",
    params(JobPath, GroupQuery),
    responses(
        (status = 200, description = "ready again", body = Envelope<'static, PushedView>),
        (status = 400, description = "an invalid id", body = Refusal),
        (status = 404, description = "no job has this id (or it was purged)", body = Refusal),
        (status = 409, description = "the job is not dead (the message names its state), or a live job took \
            its business key", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn retry(State(state): State<AppState>, ApiPath(id): ApiPath<String>, params: Params) -> ApiResult {
    let id = parse_job_id("id", &id)?;
    let group = group_of(&params)?;
    let queue = &state.queue;
    ok(PushedView::from(
        queue.on_delivery(&id, group.as_ref(), |job| async move { queue.retry_dead(&job).await }).await?,
    ))
}

/// `{"retried"}`: how many dead jobs are ready again.
#[derive(Serialize, ToSchema)]
pub(crate) struct RetriedView {
    retried: u64,
}

/// `POST /topics/{topic}/dead/retry`: retries every dead job of a topic, as
/// `POST /jobs/{id}/retry` does; a job whose business key a live job took
/// since stays dead.
#[utoipa::path(
    post,
    path = "/topics/{topic}/dead/retry",
    tag = "jobs",
    params(TopicPath, GroupQuery),
    responses(
        (status = 200, description = "how many are ready again", body = Envelope<'static, RetriedView>),
        (status = 400, description = "an invalid topic", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable (the jobs retried before \
            stay retried)", body = Refusal),
    )
)]
pub(crate) async fn retry_dead_of_topic(
    State(state): State<AppState>,
    ApiPath(topic): ApiPath<String>,
    params: Params,
) -> ApiResult {
    let topic = of_group(Topic::parse(topic)?, &params)?;
    ok(RetriedView { retried: state.queue.retry_dead_of_topic(&topic).await? })
}

/// The topic named, or with `group=` the queue of that group's deliveries.
fn of_group(topic: Topic, params: &Params) -> Result<Topic, ApiError> {
    Ok(match group_of(params)? {
        Some(group) => topic.for_group(&group),
        None => topic,
    })
}

/// `{"topic", "paused"}`: a topic as a pause or resume left it.
#[derive(Serialize, ToSchema)]
pub(crate) struct PausedView {
    topic: String,
    paused: bool,
}

/// `POST /topics/{topic}/pause`: the topic's jobs still fall due, but no pop,
/// Subscribe stream or forwarder takes them until it is resumed (through any
/// node: each reads the paused topics again every second). Pausing a paused
/// topic changes nothing.
#[utoipa::path(
    post,
    path = "/topics/{topic}/pause",
    tag = "jobs",
    params(TopicPath),
    responses(
        (status = 200, description = "paused", body = Envelope<'static, PausedView>),
        (status = 400, description = "an invalid topic", body = Refusal),
        (status = 503, description = "the store is unavailable", body = Refusal),
    )
)]
pub(crate) async fn pause(State(state): State<AppState>, ApiPath(topic): ApiPath<String>) -> ApiResult {
    let topic = Topic::parse(topic)?;
    state.queue.pause(&topic).await?;
    ok(PausedView { topic: topic.to_string(), paused: true })
}

/// `POST /topics/{topic}/resume`: the topic's ready jobs are handed out again.
/// Resuming a running topic changes nothing.
#[utoipa::path(
    post,
    path = "/topics/{topic}/resume",
    tag = "jobs",
    params(TopicPath),
    responses(
        (status = 200, description = "running", body = Envelope<'static, PausedView>),
        (status = 400, description = "an invalid topic", body = Refusal),
        (status = 503, description = "the store is unavailable", body = Refusal),
    )
)]
pub(crate) async fn resume(State(state): State<AppState>, ApiPath(topic): ApiPath<String>) -> ApiResult {
    let topic = Topic::parse(topic)?;
    state.queue.resume(&topic).await?;
    ok(PausedView { topic: topic.to_string(), paused: false })
}

/// `{"deleted"}`: how many dead jobs are gone.
#[derive(Serialize, ToSchema)]
pub(crate) struct DeletedView {
    deleted: u64,
}

/// `POST /topics/{topic}/dead/delete`: deletes every dead job of a topic with
/// its history; their ids are then unknown (`404`), as after the retention.
#[utoipa::path(
    post,
    path = "/topics/{topic}/dead/delete",
    tag = "jobs",
    params(TopicPath, GroupQuery),
    responses(
        (status = 200, description = "how many are gone", body = Envelope<'static, DeletedView>),
        (status = 400, description = "an invalid topic", body = Refusal),
        (status = 503, description = "the store is unavailable (the jobs deleted before stay deleted)",
            body = Refusal),
    )
)]
pub(crate) async fn delete_dead_of_topic(
    State(state): State<AppState>,
    ApiPath(topic): ApiPath<String>,
    params: Params,
) -> ApiResult {
    let topic = of_group(Topic::parse(topic)?, &params)?;
    ok(DeletedView { deleted: state.queue.delete_dead_of_topic(&topic).await? })
}
