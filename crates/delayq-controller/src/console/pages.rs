//! The overview (nodes, totals, the last hour, what is about to fire) and the
//! topics (counts, what is due soon, paused or not, and their actions).

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use delayq_common::{JobState, Timestamp, Topic};
use maud::{html, Markup};

use super::charts::{activity_chart, due_chart};
use super::layout::{self, action_button, count, flash, short_duration};
use super::session::{viewer, Viewer};
use crate::app::{AppState, Role};
use crate::ops::{check_backends, count_jobs, StateCounts};

/// How old the store's counts of ended jobs (and of jobs beyond the horizon)
/// may be before a page starts a new count; the page never waits for it.
const COUNTS_REFRESH: Duration = Duration::from_secs(2);

/// `GET /console`: the overview.
pub(crate) async fn overview(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Query<HashMap<String, String>>,
) -> Response {
    let viewer = match viewer(&state, &headers) {
        Ok(viewer) => viewer,
        Err(login) => return login,
    };
    let queue = &state.queue;
    let (stats, due, backends) =
        tokio::join!(queue.stats_without_waiting(COUNTS_REFRESH), queue.due_soon(None), check_backends(&state));
    let ((stats, counted_ago), due) = match (stats, due) {
        (Ok(stats), Ok(due)) => (stats, due),
        (Err(error), _) | (_, Err(error)) => return layout::api_error_page(error),
    };
    let totals = count_jobs(&stats).totals;
    let role = (state.role)();
    let activity = queue.activity().report(Timestamp::now());
    let paused = queue.paused_topics().await;
    let body = html! {
        (flash(query.get("done").map(String::as_str)))
        h1 { "Overview" }
        div.cards {
            section.card.node {
                h2 { "This node" }
                dl {
                    dt { "Role" } dd data-role=(role_name(role.role)) { (role_name(role.role)) }
                    dt { "Leader" } dd { (role.leader.as_deref().unwrap_or("unknown")) }
                    dt { "Members" } dd { (role.members.join(", ")) @if role.members.is_empty() { "this node" } }
                    @for (backend, up) in &backends {
                        dt { (backend) }
                        dd { span class=(if *up { "health up" } else { "health down" }) { (if *up { "up" } else { "down" }) } }
                    }
                    @if let Some(coordinator) = role.coordinator {
                        dt { (coordinator) }
                        dd { (if role.role == Role::Disconnected { "down" } else { "up" }) }
                    }
                    dt { "Scheduler" } dd { (stats.scheduler) }
                    dt { "Store" } dd { (stats.store) }
                    dt { "Paused topics" } dd { (count(paused.len() as u64)) }
                }
            }
            section.card.totals {
                h2 { "Jobs per state" }
                (state_table(&totals, None))
                (counted(counted_ago))
            }
        }
        div.cards {
            section.card {
                h2 { "About to fire" }
                (due_chart(&due))
            }
            section.card {
                h2 { "The last hour" }
                p.lateness {
                    "Firing lateness over " (count(activity.deliveries)) " deliveries: p50 "
                    strong data-lateness="p50" { (activity.lateness_p50.map(short_duration).unwrap_or_else(|| "–".into())) }
                    ", p99 "
                    strong data-lateness="p99" { (activity.lateness_p99.map(short_duration).unwrap_or_else(|| "–".into())) }
                    " (at most, by bucket)."
                }
                (activity_chart(&activity))
            }
        }
        @if viewer.can_act {
            section.card.danger {
                h2 { "Danger zone" }
                p { "Deletes every live job of every topic, as " code { "/clearAll" } " does. Needs an admin token." }
                (action_button(&viewer, "/console/clear", "Clear all live jobs",
                    Some("Delete every live job of every topic?")))
            }
        }
    };
    layout::page(&viewer, "overview", true, body)
}

/// `GET /console/topics`: every topic with its counts and whether it is paused.
pub(crate) async fn topics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let viewer = match viewer(&state, &headers) {
        Ok(viewer) => viewer,
        Err(login) => return login,
    };
    let (stats, counted_ago) = match state.queue.stats_without_waiting(COUNTS_REFRESH).await {
        Ok(stats) => stats,
        Err(error) => return layout::api_error_page(error),
    };
    let counts = count_jobs(&stats);
    let paused = state.queue.paused_topics().await;
    let body = html! {
        h1 { "Topics" }
        (counted(counted_ago))
        @if counts.topics.is_empty() { p { "No topic has jobs yet." } }
        @else {
            table.topics {
                thead { tr {
                    th { "Topic" }
                    @for job_state in JobState::ALL { th.num { (job_state.as_str()) } }
                    th { "Status" }
                    @if viewer.can_act { th { "Actions" } }
                } }
                tbody {
                    @for (name, topic_counts) in &counts.topics {
                        @let is_paused = Topic::parse(name.clone()).is_ok_and(|topic| paused.contains(&topic));
                        tr data-topic=(name) {
                            td { a href=(format!("/console/topics/{name}")) { (name) } }
                            @for job_state in JobState::ALL {
                                td.num { a href=(jobs_link(name, job_state)) { (count(topic_counts.get(job_state))) } }
                            }
                            td { (paused_badge(is_paused)) }
                            @if viewer.can_act { td { (pause_button(&viewer, name, is_paused)) } }
                        }
                    }
                }
            }
        }
    };
    layout::page(&viewer, "topics", true, body)
}

/// `GET /console/topics/{topic}`: one topic.
pub(crate) async fn topic(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
    query: Query<HashMap<String, String>>,
) -> Response {
    let viewer = match viewer(&state, &headers) {
        Ok(viewer) => viewer,
        Err(login) => return login,
    };
    let topic = match topic_of(path) {
        Ok(topic) => topic,
        Err(refusal) => return refusal,
    };
    let queue = &state.queue;
    let (stats, due) = tokio::join!(queue.stats_without_waiting(COUNTS_REFRESH), queue.due_soon(Some(&topic)));
    let ((stats, counted_ago), due) = match (stats, due) {
        (Ok(stats), Ok(due)) => (stats, due),
        (Err(error), _) | (_, Err(error)) => return layout::api_error_page(error),
    };
    let counts = count_jobs(&stats).topics.remove(topic.as_str()).unwrap_or_default();
    let is_paused = queue.paused_topics().await.contains(&topic);
    let name = topic.as_str();
    let body = html! {
        (flash(query.get("done").map(String::as_str)))
        h1 { "Topic " span.name { (name) } " " (paused_badge(is_paused)) }
        div.cards {
            section.card {
                h2 { "Jobs per state" }
                (state_table(&counts, Some(name)))
                (counted(counted_ago))
            }
            section.card {
                h2 { "Due soon" }
                (due_chart(&due))
            }
        }
        @if viewer.can_act {
            section.card.actions {
                h2 { "Actions" }
                div.buttons {
                    (pause_button(&viewer, name, is_paused))
                    (action_button(&viewer, &format!("/console/topics/{name}/dead/retry"), "Retry all dead",
                        Some("Make every dead job of this topic ready again?")))
                    (action_button(&viewer, &format!("/console/topics/{name}/dead/delete"), "Delete all dead",
                        Some("Delete every dead job of this topic, with its history?")))
                }
            }
        }
    };
    layout::page(&viewer, name, true, body)
}

/// A topic from the path, or the error page of an invalid one.
pub(crate) fn topic_of(path: Result<Path<String>, axum::extract::rejection::PathRejection>) -> Result<Topic, Response> {
    let Ok(Path(name)) = path else {
        return Err(layout::error_page(StatusCode::BAD_REQUEST, "the topic is not valid"));
    };
    Topic::parse(name).map_err(layout::api_error_page)
}

/// The counts per state; with a topic, each count links to its jobs.
fn state_table(counts: &StateCounts, topic: Option<&str>) -> Markup {
    html! {
        table.states {
            tbody {
                @for job_state in JobState::ALL {
                    tr {
                        th { (layout::state_badge(job_state)) }
                        td.num data-state=(job_state.as_str()) {
                            @match topic {
                                Some(topic) => { a href=(jobs_link(topic, job_state)) { (count(counts.get(job_state))) } }
                                None => { (count(counts.get(job_state))) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// How old the counts are, when they are not from this very moment.
fn counted(age: Duration) -> Markup {
    html! {
        @if age >= Duration::from_secs(1) {
            p.counted { "Counted " (humantime::format_duration(Duration::from_secs(age.as_secs()))) " ago; the jobs the scheduler holds are counted now." }
        }
    }
}

/// The jobs list of a topic in a state.
pub(crate) fn jobs_link(topic: &str, state: JobState) -> String {
    format!("/console/topics/{topic}/jobs?state={}", state.as_str())
}

fn paused_badge(paused: bool) -> Markup {
    html! {
        @if paused { span.badge.paused data-paused="true" { "paused" } }
        @else { span.badge.running data-paused="false" { "running" } }
    }
}

fn pause_button(viewer: &Viewer, topic: &str, paused: bool) -> Markup {
    if paused {
        action_button(viewer, &format!("/console/topics/{topic}/resume"), "Resume", None)
    } else {
        action_button(
            viewer,
            &format!("/console/topics/{topic}/pause"),
            "Pause",
            Some("Stop handing out this topic's jobs?"),
        )
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Leader => "leader",
        Role::Follower => "follower",
        Role::Standalone => "standalone",
        Role::Disconnected => "disconnected",
    }
}
