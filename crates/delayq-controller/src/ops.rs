//! The operations endpoints: `/health`, `/ready`, `/stats` and `/metrics`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use delayq_common::JobState;
use delayq_queue::QueueStats;
use serde::Serialize;
use tracing::warn;

use crate::app::{AppState, Role, RoleInfo};
use crate::error::{envelope, ok, ApiResult};

/// How long `/ready` waits for the backends before calling them unavailable.
const READY_TIMEOUT: Duration = Duration::from_secs(2);
/// The gauge of job counts per state, set on every scrape.
const JOBS_GAUGE: &str = "delayq_jobs";
/// The content type of the Prometheus text format.
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How many jobs are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
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

    fn get(&self, state: JobState) -> u64 {
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

/// Counts per topic and in total: live states from the scheduler (always
/// current), ended states from the store.
fn count_jobs(stats: &QueueStats) -> (BTreeMap<String, StateCounts>, StateCounts) {
    let mut topics: BTreeMap<String, StateCounts> = BTreeMap::new();
    for live in &stats.live {
        let counts = topics.entry(live.topic.to_string()).or_default();
        counts.add(JobState::Delay, live.delay);
        counts.add(JobState::Ready, live.ready);
        counts.add(JobState::Reserved, live.reserved);
    }
    for stored in stats.stored.iter().filter(|stored| stored.state.is_terminal()) {
        topics.entry(stored.topic.to_string()).or_default().add(stored.state, stored.count);
    }
    let mut totals = StateCounts::default();
    for counts in topics.values() {
        for state in JobState::ALL {
            totals.add(state, counts.get(state));
        }
    }
    (topics, totals)
}

/// `GET /health`: 200 while the process serves.
pub(crate) async fn health() -> ApiResult {
    ok(serde_json::json!({ "status": "up" }))
}

/// `GET /ready`: 200 when every backend answers, else 503 naming the ones that do not.
pub(crate) async fn ready(State(state): State<AppState>) -> ApiResult {
    let checks = match tokio::time::timeout(READY_TIMEOUT, state.queue.check_backends()).await {
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
    };
    let mut checks: Vec<(&str, bool)> = checks;
    let role = (state.role)();
    if let Some(coordinator) = role.coordinator {
        checks.push((coordinator, role.role != Role::Disconnected));
    }
    let down: Vec<&str> = checks.iter().filter(|(_, up)| !up).map(|(backend, _)| *backend).collect();
    let backends: BTreeMap<&str, &str> =
        checks.iter().map(|(backend, up)| (*backend, if *up { "up" } else { "down" })).collect();
    let data = serde_json::json!({ "backends": backends });
    if down.is_empty() {
        return ok(data);
    }
    let message = format!("{} is unavailable", down.join(" and "));
    envelope(StatusCode::SERVICE_UNAVAILABLE, false, &message, data)
}

/// The answer to `/stats`.
#[derive(Serialize)]
struct StatsView {
    topics: BTreeMap<String, StateCounts>,
    totals: StateCounts,
    #[serde(flatten)]
    role: RoleInfo,
    backends: Backends,
}

#[derive(Serialize)]
struct Backends {
    scheduler: &'static str,
    store: &'static str,
}

/// `GET /stats`: counts per topic and state, the role and the backends.
pub(crate) async fn stats(State(state): State<AppState>) -> ApiResult {
    let stats = state.queue.stats().await?;
    let (topics, totals) = count_jobs(&stats);
    let backends = Backends { scheduler: stats.scheduler, store: stats.store };
    ok(StatsView { topics, totals, role: (state.role)(), backends })
}

/// `GET /metrics`: the Prometheus text format, with the job gauges refreshed.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    match state.queue.stats().await {
        Ok(stats) => {
            let (_, totals) = count_jobs(&stats);
            for job_state in JobState::ALL {
                metrics::gauge!(JOBS_GAUGE, "state" => job_state.as_str()).set(totals.get(job_state) as f64);
            }
        }
        // Still serve the other metrics while a backend is down.
        Err(error) => warn!(error = &error as &dyn std::error::Error, "job counts unavailable for metrics"),
    }
    let text = state.config.metrics.render();
    ([(header::CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_CONTENT_TYPE))], text).into_response()
}

#[cfg(test)]
mod tests {
    use delayq_common::Topic;
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
        };
        let (topics, totals) = count_jobs(&stats);
        let expected = StateCounts { delay: 2, ready: 1, reserved: 1, finished: 4, ..StateCounts::default() };
        assert_eq!(topics.get("t"), Some(&expected));
        assert_eq!(totals, expected);
    }
}
