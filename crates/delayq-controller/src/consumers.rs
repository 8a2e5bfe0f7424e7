//! The registry of consumers over REST: the name a pop gives (`consumer=` or
//! the `delayq-consumer` header), `POST /consumers/heartbeat`, and the list
//! `/stats` and `/metrics` show.

use axum::extract::State;
use axum::http::HeaderMap;
use delayq_common::{ConsumerName, Group, InvalidField};
use delayq_queue::{ConsumerKey, ConsumerView};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

use crate::app::AppState;
use crate::error::{ok, ApiError, ApiResult, Envelope};
use crate::extract::Params;
use crate::ops::millis;
use crate::schemas::Refusal;

/// The header a consumer may name itself in instead of `consumer=`.
pub(crate) const CONSUMER_HEADER: &str = "delayq-consumer";
/// The gauge of the consumers `/stats` lists.
const CONSUMERS_GAUGE: &str = "delayq_consumers";
/// The gauge of the jobs they hold.
const CONSUMER_JOBS_GAUGE: &str = "delayq_consumer_jobs_in_flight";

/// Returns the consumer a request names: `consumer=`, else the
/// `delayq-consumer` header; `None` when it names none.
pub(crate) fn consumer_of(params: &Params, headers: &HeaderMap) -> Result<Option<ConsumerName>, ApiError> {
    if let Some(name) = params.get("consumer") {
        return Ok(Some(ConsumerName::parse(name)?));
    }
    match headers.get(CONSUMER_HEADER) {
        None => Ok(None),
        Some(value) => {
            let text = value.to_str().map_err(|_| InvalidField::new("consumer", "must be ASCII"))?;
            Ok(Some(ConsumerName::parse(text)?))
        }
    }
}

/// Returns the optional `group`.
pub(crate) fn group_of(params: &Params) -> Result<Option<Group>, ApiError> {
    params.get("group").map(Group::parse).transpose().map_err(ApiError::from)
}

/// Who keeps itself listed.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "never built: `heartbeat` reads it through `Params`")]
pub(crate) struct HeartbeatQuery {
    /// The consumer's name (or the `delayq-consumer` header).
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    consumer: Option<String>,
    /// The topic it takes jobs of.
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    topic: String,
    /// The group it takes them in.
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    group: Option<String>,
}

/// What a heartbeat kept listed, and for how long without another.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeartbeatView {
    consumer: String,
    topic: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    /// How long the consumer stays listed without a pop or another heartbeat, in ms.
    forget_after_ms: u64,
}

/// `POST /consumers/heartbeat?consumer=&topic=&group=`: keeps a consumer
/// listed between pops (a consumer that waits long, or works long on a job).
#[utoipa::path(
    post,
    path = "/consumers/heartbeat",
    tag = "consumers",
    params(HeartbeatQuery),
    responses(
        (status = 200, description = "the consumer is listed", body = Envelope<'static, HeartbeatView>),
        (status = 400, description = "`consumer` or `topic` missing or invalid, `group` invalid", body = Refusal),
    )
)]
pub(crate) async fn heartbeat(State(state): State<AppState>, headers: HeaderMap, params: Params) -> ApiResult {
    let consumer = consumer_of(&params, &headers)?.ok_or_else(|| ApiError::invalid("consumer is required"))?;
    let topic = params.topic()?;
    let group = group_of(&params)?;
    let key = ConsumerKey { consumer, topic, group };
    state.queue.heartbeat(&key);
    ok(HeartbeatView {
        consumer: key.consumer.to_string(),
        topic: key.topic.to_string(),
        group: key.group.map(|group| group.to_string()),
        forget_after_ms: millis(state.queue.settings().forget_consumers_after),
    })
}

/// A consumer as `/stats` lists it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConsumerEntry {
    consumer: String,
    topic: String,
    /// Absent for a consumer of the topic's jobs themselves.
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    /// The node it reached last.
    node: String,
    /// Its last pop or heartbeat, epoch ms.
    last_seen: u64,
    /// Jobs handed to it and not finished, nacked, deleted or past their ttr.
    in_flight: u64,
}

impl From<ConsumerView> for ConsumerEntry {
    fn from(view: ConsumerView) -> ConsumerEntry {
        ConsumerEntry {
            consumer: view.key.consumer.to_string(),
            topic: view.key.topic.to_string(),
            group: view.key.group.map(|group| group.to_string()),
            node: view.node,
            last_seen: view.last_seen.as_millis(),
            in_flight: view.in_flight,
        }
    }
}

/// Returns every listed consumer for `/stats`.
pub(crate) async fn listed(state: &AppState) -> Result<Vec<ConsumerEntry>, ApiError> {
    let views = state.queue.consumers().await?;
    Ok(views.into_iter().map(ConsumerEntry::from).collect())
}

/// Sets the consumer gauges of `/metrics`.
pub(crate) async fn set_gauges(state: &AppState) -> Result<(), delayq_queue::QueueError> {
    let views = state.queue.consumers().await?;
    metrics::gauge!(CONSUMERS_GAUGE).set(views.len() as f64);
    metrics::gauge!(CONSUMER_JOBS_GAUGE).set(views.iter().map(|view| view.in_flight).sum::<u64>() as f64);
    Ok(())
}
