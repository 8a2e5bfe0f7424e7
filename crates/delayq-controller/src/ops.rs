//! The operations endpoints: `/health`, `/ready`, `/stats` and `/metrics`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use delayq_common::{JobState, Timestamp, Topic};
use delayq_queue::{HorizonStats, QueueStats};
use serde::Serialize;
use tracing::warn;
use utoipa::ToSchema;

use crate::app::{AppState, Role, RoleInfo};
use crate::consumers::{self, ConsumerEntry};
use crate::error::{envelope, ok, ApiResult, Envelope};
use crate::schemas::Refusal;

/// How long `/ready` waits for the backends before calling them unavailable.
const READY_TIMEOUT: Duration = Duration::from_secs(2);
/// The gauge of job counts per state, set on every scrape.
const JOBS_GAUGE: &str = "delayq_jobs";
/// The gauge of live jobs per tier: `hot` in the scheduler, `cold` in the store alone.
const HORIZON_JOBS_GAUGE: &str = "delayq_horizon_jobs";
/// The gauge of the horizon's loaded mark, epoch ms.
const HORIZON_LOADED_GAUGE: &str = "delayq_horizon_loaded_until_ms";
/// The gauge of how far the loaded mark is behind `now + span`, in seconds.
const HORIZON_LAG_GAUGE: &str = "delayq_horizon_lag_seconds";
/// The content type of the Prometheus text format.
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How many jobs are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct StateCounts {
    delay: u64,
    ready: u64,
    reserved: u64,
    finished: u64,
    deleted: u64,
    dead: u64,
    expired: u64,
}

impl StateCounts {
    fn add(&mut self, state: JobState, count: u64) {
        let slot = match state {
            JobState::Delay => &mut self.delay,
            JobState::Ready => &mut self.ready,
            JobState::Reserved => &mut self.reserved,
            JobState::Finished => &mut self.finished,
            JobState::Deleted => &mut self.deleted,
            JobState::Dead => &mut self.dead,
            JobState::Expired => &mut self.expired,
        };
        *slot += count;
    }

    pub(crate) fn get(&self, state: JobState) -> u64 {
        match state {
            JobState::Delay => self.delay,
            JobState::Ready => self.ready,
            JobState::Reserved => self.reserved,
            JobState::Finished => self.finished,
            JobState::Deleted => self.deleted,
            JobState::Dead => self.dead,
            JobState::Expired => self.expired,
        }
    }
}

/// The counts of `/stats`: per topic, per topic and group (the groups'
/// deliveries), and in total.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct JobCounts {
    pub(crate) topics: BTreeMap<String, StateCounts>,
    pub(crate) deliveries: BTreeMap<String, BTreeMap<String, StateCounts>>,
    pub(crate) totals: StateCounts,
}

impl JobCounts {
    /// Returns the counts of a topic, or of a group's deliveries when `topic`
    /// is the queue of one (`Topic::for_group`), which is shown by its topic and group.
    fn of(&mut self, topic: &Topic) -> &mut StateCounts {
        match topic.group_parts() {
            Some((topic, group)) => self.deliveries.entry(topic.into()).or_default().entry(group.into()).or_default(),
            None => self.topics.entry(topic.to_string()).or_default(),
        }
    }
}

/// Counts per topic, per group's deliveries and in total: live states from
/// the scheduler (always current), ended states from the store.
pub(crate) fn count_jobs(stats: &QueueStats) -> JobCounts {
    let mut counts = JobCounts::default();
    for live in &stats.live {
        let topic = counts.of(&live.topic);
        topic.add(JobState::Delay, live.delay);
        topic.add(JobState::Ready, live.ready);
        topic.add(JobState::Reserved, live.reserved);
    }
    for stored in stats.stored.iter().filter(|stored| stored.state.is_terminal()) {
        counts.of(&stored.topic).add(stored.state, stored.count);
    }
    let delivered = counts.deliveries.values().flat_map(BTreeMap::values);
    let mut totals = StateCounts::default();
    for topic in counts.topics.values().chain(delivered) {
        for state in JobState::ALL {
            totals.add(state, topic.get(state));
        }
    }
    counts.totals = totals;
    counts
}

/// `{"status": "up"}`: the answer to `/health`.
#[derive(Serialize, ToSchema)]
struct Health {
    /// Always `up`.
    #[schema(example = "up")]
    status: &'static str,
}

/// `GET /health`: 200 while the process serves.
///
/// Liveness: it checks no backend and needs no token.
#[utoipa::path(
    get,
    path = "/health",
    tag = "ops",
    responses((status = 200, description = "the process serves", body = Envelope<'static, Health>))
)]
pub(crate) async fn health() -> ApiResult {
    ok(Health { status: "up" })
}

/// Whether a backend answered.
#[derive(Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum BackendState {
    Up,
    Down,
}

/// `{"backends": {name: "up" or "down"}}`: the answer to `/ready`.
#[derive(Serialize, ToSchema)]
struct Readiness {
    /// Per backend: the scheduler (`memory` or `redis`), the store (`sqlite` or `mysql`) and,
    /// when configured, `zookeeper`.
    backends: BTreeMap<&'static str, BackendState>,
}

/// `GET /ready`: 200 when every backend answers, else 503 naming the ones that do not.
///
/// Asks every backend, waiting at most 2 s; past that the scheduler and the store are down.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "ops",
    responses(
        (status = 200, description = "every backend is up", body = Envelope<'static, Readiness>),
        (status = 503, description = "a backend is down: the message names it, `data` is still given",
            body = Envelope<'static, Readiness>),
    )
)]
pub(crate) async fn ready(State(state): State<AppState>) -> ApiResult {
    let mut checks = check_backends(&state).await;
    let role = (state.role)();
    if let Some(coordinator) = role.coordinator {
        checks.push((coordinator, role.role != Role::Disconnected));
    }
    let down: Vec<&str> = checks.iter().filter(|(_, up)| !up).map(|(backend, _)| *backend).collect();
    let backends = checks
        .iter()
        .map(|(backend, up)| (*backend, if *up { BackendState::Up } else { BackendState::Down }))
        .collect();
    let data = Readiness { backends };
    if down.is_empty() {
        return ok(data);
    }
    let message = format!("{} is unavailable", down.join(" and "));
    envelope(StatusCode::SERVICE_UNAVAILABLE, false, &message, data)
}

/// Asks the scheduler and the store whether they answer, within [`READY_TIMEOUT`].
pub(crate) async fn check_backends(state: &AppState) -> Vec<(&'static str, bool)> {
    match tokio::time::timeout(READY_TIMEOUT, state.queue.check_backends()).await {
        Ok(checks) => checks
            .into_iter()
            .map(|(backend, outcome)| {
                if let Err(error) = &outcome {
                    warn!(backend, error = error as &dyn std::error::Error, "backend check failed");
                }
                (backend, outcome.is_ok())
            })
            .collect(),
        Err(_) => {
            warn!("backend checks timed out");
            vec![(state.queue.scheduler().backend(), false), (state.queue.store().backend(), false)]
        }
    }
}

/// The answer to `/stats`.
#[derive(Serialize, ToSchema)]
struct StatsView {
    /// Per topic, the number of jobs in each state.
    topics: BTreeMap<String, StateCounts>,
    /// Per topic with consumer groups and per group, the number of the group's
    /// deliveries in each state.
    deliveries: BTreeMap<String, BTreeMap<String, StateCounts>>,
    /// The same counts summed over the topics and the deliveries.
    totals: StateCounts,
    #[serde(flatten)]
    role: RoleInfo,
    /// The backends this node uses.
    backends: Backends,
    /// Where the horizon stands; absent when the scheduler holds every job.
    #[serde(skip_serializing_if = "Option::is_none")]
    horizon: Option<HorizonView>,
    /// The consumers seen within `consumers.forget_after_ms`, through any node
    /// that shares this node's scheduler, by topic, group and name.
    consumers: Vec<ConsumerEntry>,
    /// The paused topics, by name.
    paused: Vec<String>,
    /// The declared consumer groups of each topic that has any, by name.
    groups: BTreeMap<String, Vec<String>>,
}

/// Where the horizon stands: the scheduler holds the jobs due by
/// `loadedUntil`; the store alone holds those due later (`cold`), until the
/// leader's loader brings them.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct HorizonView {
    /// How far ahead the leader loads now, in ms (shrunk under memory
    /// pressure); absent when this node runs without a horizon.
    span_ms: Option<u64>,
    /// Pushes due by this instant (epoch ms) go to the scheduler at once.
    admitted_until: u64,
    /// Every live job due by this instant (epoch ms) is in the scheduler.
    loaded_until: Option<u64>,
    /// Live jobs the scheduler holds.
    hot: u64,
    /// Live jobs only the store holds.
    cold: u64,
    /// How far the loaded mark is behind `now + spanMs`, in ms.
    lag_ms: u64,
}

impl From<&HorizonStats> for HorizonView {
    fn from(stats: &HorizonStats) -> HorizonView {
        HorizonView {
            span_ms: stats.span.map(millis),
            admitted_until: stats.admitted_until.as_millis(),
            loaded_until: stats.loaded_until.map(Timestamp::as_millis),
            hot: stats.hot,
            cold: stats.cold,
            lag_ms: millis(stats.lag),
        }
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The backends a node uses.
#[derive(Serialize, ToSchema)]
struct Backends {
    /// `memory` or `redis`.
    scheduler: &'static str,
    /// `sqlite` or `mysql`.
    store: &'static str,
}

/// `GET /stats`: counts per topic and state, the role and the backends.
///
/// Live counts come from the scheduler; ended counts from the store, for the jobs it keeps.
#[utoipa::path(
    get,
    path = "/stats",
    tag = "ops",
    responses(
        (status = 200, description = "the counts", body = Envelope<'static, StatsView>),
        (status = 503, description = "the scheduler or the store is unavailable", body = Refusal),
    )
)]
pub(crate) async fn stats(State(state): State<AppState>) -> ApiResult {
    let stats = state.queue.stats().await?;
    let JobCounts { topics, deliveries, totals } = count_jobs(&stats);
    let backends = Backends { scheduler: stats.scheduler, store: stats.store };
    let horizon = stats.horizon.as_ref().map(HorizonView::from);
    let consumers = consumers::listed(&state).await?;
    let mut paused: Vec<String> = state.queue.paused_topics().await.iter().map(ToString::to_string).collect();
    paused.sort();
    let groups = declared_groups(&state).await;
    let role = (state.role)();
    ok(StatsView { topics, deliveries, totals, role, backends, horizon, consumers, paused, groups })
}

/// The declared groups of each topic that has any, each list sorted.
async fn declared_groups(state: &AppState) -> BTreeMap<String, Vec<String>> {
    let declared = state.queue.groups().await;
    let mut groups = BTreeMap::new();
    for (topic, names) in declared.iter() {
        let mut names: Vec<String> = names.iter().map(ToString::to_string).collect();
        names.sort();
        groups.insert(topic.to_string(), names);
    }
    groups
}

/// `GET /metrics`: the Prometheus text format, with the job gauges refreshed.
///
/// Without the envelope. When a backend is down the other metrics are still served.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "ops",
    responses((status = 200, description = "the metrics", body = String, content_type = "text/plain; version=0.0.4"))
)]
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    match state.queue.stats().await {
        Ok(stats) => {
            let totals = count_jobs(&stats).totals;
            for job_state in JobState::ALL {
                metrics::gauge!(JOBS_GAUGE, "state" => job_state.as_str()).set(totals.get(job_state) as f64);
            }
            if let Some(horizon) = &stats.horizon {
                let view = HorizonView::from(horizon);
                metrics::gauge!(HORIZON_JOBS_GAUGE, "tier" => "hot").set(view.hot as f64);
                metrics::gauge!(HORIZON_JOBS_GAUGE, "tier" => "cold").set(view.cold as f64);
                metrics::gauge!(HORIZON_LOADED_GAUGE).set(view.loaded_until.unwrap_or(0) as f64);
                metrics::gauge!(HORIZON_LAG_GAUGE).set(view.lag_ms as f64 / 1000.0);
            }
        }
        // Still serve the other metrics while a backend is down.
        Err(error) => warn!(error = &error as &dyn std::error::Error, "job counts unavailable for metrics"),
    }
    if let Err(error) = consumers::set_gauges(&state).await {
        warn!(error = &error as &dyn std::error::Error, "consumers unavailable for metrics");
    }
    let text = state.config.metrics.render();
    ([(header::CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_CONTENT_TYPE))], text).into_response()
}

#[cfg(test)]
mod tests {
    use delayq_common::Group;
    use delayq_queue::TopicStats;
    use delayq_store::StateCount;

    use super::*;

    #[test]
    fn live_counts_come_from_the_scheduler_and_ended_ones_from_the_store() {
        let Ok(topic) = Topic::parse("t") else { panic!("valid topic") };
        let stats = QueueStats {
            live: vec![TopicStats { topic: topic.clone(), delay: 2, ready: 1, reserved: 1 }],
            stored: vec![
                StateCount { topic: topic.clone(), state: JobState::Delay, count: 9 },
                StateCount { topic: topic.clone(), state: JobState::Finished, count: 4 },
            ],
            scheduler: "memory",
            store: "sqlite",
            horizon: None,
        };
        let counts = count_jobs(&stats);
        let expected = StateCounts { delay: 2, ready: 1, reserved: 1, finished: 4, ..StateCounts::default() };
        assert_eq!(counts.topics.get("t"), Some(&expected));
        assert_eq!(counts.totals, expected);
    }

    #[test]
    fn deliveries_are_counted_by_topic_and_group_never_under_their_queue() {
        let (Ok(topic), Ok(group)) = (Topic::parse("t"), Group::parse("g")) else { panic!("valid names") };
        let queue = topic.for_group(&group);
        let stats = QueueStats {
            live: vec![
                TopicStats { topic: topic.clone(), delay: 1, ready: 0, reserved: 0 },
                TopicStats { topic: queue.clone(), delay: 0, ready: 2, reserved: 1 },
            ],
            stored: vec![StateCount { topic: queue, state: JobState::Dead, count: 3 }],
            scheduler: "memory",
            store: "sqlite",
            horizon: None,
        };
        let counts = count_jobs(&stats);
        assert_eq!(counts.topics.keys().collect::<Vec<_>>(), ["t"]);
        let delivered = StateCounts { ready: 2, reserved: 1, dead: 3, ..StateCounts::default() };
        assert_eq!(counts.deliveries.get("t").and_then(|groups| groups.get("g")), Some(&delivered));
        assert_eq!(counts.totals, StateCounts { delay: 1, ready: 2, reserved: 1, dead: 3, ..StateCounts::default() });
    }
}
