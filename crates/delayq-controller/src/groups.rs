//! Consumer groups of a topic: `PUT /topics/{topic}/groups/{group}` declares
//! one, `DELETE` drops it, `GET /topics/{topic}/groups` lists them. Each job
//! of a topic with groups is delivered to every group declared when it falls
//! due; the job routes take `group=` to act on one group's delivery.

use axum::extract::State;
use delayq_common::{ErrorKind, Group, Topic};
use serde::Serialize;
use utoipa::ToSchema;

use crate::app::AppState;
use crate::error::{ok, ApiError, ApiResult, Envelope};
use crate::extract::ApiPath;
use crate::params::{TopicGroupPath, TopicPath};
use crate::schemas::Refusal;

/// `{"topic", "group", "created"}`: a declared group.
#[derive(Serialize, ToSchema)]
pub(crate) struct DeclaredView {
    topic: String,
    group: String,
    /// `false` when the group was declared already.
    created: bool,
}

/// `{"topic", "group"}`: a dropped group.
#[derive(Serialize, ToSchema)]
pub(crate) struct DroppedView {
    topic: String,
    group: String,
}

/// Validates a topic and a group named in the path, naming the one refused.
fn parse_path(topic: String, group: String) -> Result<(Topic, Group), ApiError> {
    Ok((Topic::parse(topic)?, Group::parse(group)?))
}

/// `PUT /topics/{topic}/groups/{group}`: declares a consumer group. Each job
/// of the topic that falls due from now on is delivered to it (within a
/// second on every node); jobs already due are not. Declaring a declared
/// group changes nothing.
#[utoipa::path(
    put,
    path = "/topics/{topic}/groups/{group}",
    tag = "groups",
    params(TopicGroupPath),
    responses(
        (status = 200, description = "declared; `created` says whether it is new", body = Envelope<'static, DeclaredView>),
        (status = 400, description = "an invalid topic or group, or the topic has as many groups as it may \
            have", body = Refusal),
        (status = 503, description = "the store is unavailable", body = Refusal),
    )
)]
pub(crate) async fn declare_group(
    State(state): State<AppState>,
    ApiPath((topic, group)): ApiPath<(String, String)>,
) -> ApiResult {
    let (topic, group) = parse_path(topic, group)?;
    let created = state.queue.declare_group(&topic, &group).await?;
    ok(DeclaredView { topic: topic.into(), group: group.into(), created })
}

/// `DELETE /topics/{topic}/groups/{group}`: drops a consumer group. Jobs
/// falling due from now on are not delivered to it; the deliveries it has
/// keep going until they end. When its last group is dropped, the topic's
/// jobs are popped without a group again.
#[utoipa::path(
    delete,
    path = "/topics/{topic}/groups/{group}",
    tag = "groups",
    params(TopicGroupPath),
    responses(
        (status = 200, description = "dropped", body = Envelope<'static, DroppedView>),
        (status = 400, description = "an invalid topic or group", body = Refusal),
        (status = 404, description = "the topic has no such group", body = Refusal),
        (status = 503, description = "the store is unavailable", body = Refusal),
    )
)]
pub(crate) async fn drop_group(
    State(state): State<AppState>,
    ApiPath((topic, group)): ApiPath<(String, String)>,
) -> ApiResult {
    let (topic, group) = parse_path(topic, group)?;
    if !state.queue.drop_group(&topic, &group).await? {
        return Err(ApiError::new(ErrorKind::NotFound, format!("topic {topic} has no group {group}")));
    }
    ok(DroppedView { topic: topic.into(), group: group.into() })
}

/// `GET /topics/{topic}/groups`: the topic's groups by name (as this node read
/// them at most a second ago); empty when it has none.
#[utoipa::path(
    get,
    path = "/topics/{topic}/groups",
    tag = "groups",
    params(TopicPath),
    responses(
        (status = 200, description = "the groups, by name", body = Envelope<'static, Vec<String>>),
        (status = 400, description = "an invalid topic", body = Refusal),
    )
)]
pub(crate) async fn list_groups(State(state): State<AppState>, ApiPath(topic): ApiPath<String>) -> ApiResult {
    let topic = Topic::parse(topic)?;
    let mut names: Vec<String> = state.queue.groups_of(&topic).await.into_iter().map(String::from).collect();
    names.sort();
    ok(names)
}
