//! A topic's jobs in a state (paged by id, in push order), the search by id or business key, and
//! one job with every field, its body, its history and its actions.

use std::collections::HashMap;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use delayq_common::{Job, JobState, Timestamp};
use delayq_queue::JobDetails;
use maud::{html, Markup};

use super::layout::{self, action_button, count, flash, instant, relative, state_badge};
use super::pages::{jobs_link, topic_of};
use super::session::{see_other, viewer, Viewer};
use crate::app::AppState;
use crate::extract::parse_job_id;

/// How many jobs a page of the list shows.
const PAGE_SIZE: usize = 50;
/// The form of a due time the reschedule form takes (UTC).
const RUN_AT_PATTERN: &str = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?Z?";
/// How many lines of a job's history its page shows (the newest).
const HISTORY_LINES: usize = 200;

/// `GET /console/topics/{topic}/jobs?state=&after=`: a page of a topic's jobs in a state, by id.
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let viewer = match viewer(&state, &headers) {
        Ok(viewer) => viewer,
        Err(login) => return login,
    };
    let topic = match topic_of(path) {
        Ok(topic) => topic,
        Err(refusal) => return refusal,
    };
    let job_state = match query.get("state").map(|text| text.parse::<JobState>()) {
        None => JobState::Delay,
        Some(Ok(job_state)) => job_state,
        Some(Err(_)) => return layout::error_page(StatusCode::BAD_REQUEST, "state is not a job state"),
    };
    let after = match query.get("after").map(|text| parse_job_id("after", text)).transpose() {
        Ok(after) => after,
        Err(error) => return layout::api_error_page(error),
    };
    let jobs = match state.queue.list_by_id(&topic, job_state, PAGE_SIZE, after.as_ref()).await {
        Ok(jobs) => jobs,
        Err(error) => return layout::api_error_page(error),
    };
    let next = (jobs.len() == PAGE_SIZE).then(|| jobs.last().map(|job| job.id.clone())).flatten();
    let name = topic.as_str();
    let now = Timestamp::now();
    let body = html! {
        h1 { a href=(format!("/console/topics/{name}")) { (name) } " · " (state_badge(job_state)) " jobs" }
        nav.states {
            @for other in JobState::ALL {
                a href=(jobs_link(name, other)) class=[(other == job_state).then_some("current")] { (other.as_str()) }
            }
        }
        form.search method="get" action="/console/search" {
            input type="hidden" name="topic" value=(name);
            input type="search" name="bizKey" placeholder="business key" aria-label="business key";
            button type="submit" { "Find by business key" }
        }
        @if jobs.is_empty() { p.empty { "No " (job_state.as_str()) " job in this topic." } }
        @else {
            table.jobs {
                thead { tr { th { "Id" } th { "Due" } th.num { "Attempt" } th { "Business key" } th { "Priority" } } }
                tbody {
                    @for job in &jobs {
                        tr data-job=(job.id.as_str()) {
                            td { a href=(format!("/console/jobs/{}", job.id.as_str())) { (job.id.as_str()) } }
                            td title=(instant(job.run_at)) { (relative(job.run_at, now)) }
                            td.num { (job.attempt) }
                            td { (job.biz_key.as_deref().unwrap_or("")) }
                            td { (job.priority) }
                        }
                    }
                }
            }
        }
        p.pager {
            @if after.is_some() { a href=(jobs_link(name, job_state)) { "First page" } " " }
            @if let Some(next) = &next {
                a.next href=(format!("{}&after={}", jobs_link(name, job_state), next.as_str())) { "Next page" }
            }
        }
    };
    layout::page(&viewer, &format!("{name} {}", job_state.as_str()), false, body)
}

/// `GET /console/search?id=` or `?topic=&bizKey=`: goes to the job found.
pub(crate) async fn search(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(login) = viewer(&state, &headers) {
        return login;
    }
    let id = match (query.get("id").map(|id| id.trim()), query.get("topic"), query.get("bizKey")) {
        (Some(id), _, _) if !id.is_empty() => match parse_job_id("id", id) {
            Ok(id) => id,
            Err(error) => return layout::api_error_page(error),
        },
        (_, Some(topic), Some(biz_key)) => {
            let topic = match delayq_common::Topic::parse(topic.clone()) {
                Ok(topic) => topic,
                Err(error) => return layout::api_error_page(error),
            };
            match state.queue.resolve_biz_key(&topic, biz_key.trim()).await {
                Ok(id) => id,
                Err(error) => return layout::api_error_page(error),
            }
        }
        _ => return layout::error_page(StatusCode::BAD_REQUEST, "give a job id, or a topic and a business key"),
    };
    if let Err(error) = state.queue.get_with_history(&id, 1).await {
        return layout::api_error_page(error);
    }
    see_other(&format!("/console/jobs/{}", id.as_str()))
}

/// `GET /console/jobs/{id}`: one job.
pub(crate) async fn job(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let viewer = match viewer(&state, &headers) {
        Ok(viewer) => viewer,
        Err(login) => return login,
    };
    let Ok(Path(id)) = path else {
        return layout::error_page(StatusCode::BAD_REQUEST, "the job id is not valid");
    };
    let id = match parse_job_id("id", &id) {
        Ok(id) => id,
        Err(error) => return layout::api_error_page(error),
    };
    let details = match state.queue.get_with_history(&id, HISTORY_LINES).await {
        Ok(details) => details,
        Err(error) => return layout::api_error_page(error),
    };
    let body = html! {
        (flash(query.get("done").map(String::as_str)))
        h1 { "Job " span.name { (id.as_str()) } " " (state_badge(details.job.state)) }
        div.cards {
            section.card { h2 { "Fields" } (fields(&details.job)) }
            section.card { h2 { "History" } (timeline(&details)) }
        }
        section.card {
            h2 { "Body" }
            pre.body { code { (pretty_body(&details.job.body)) } }
        }
        @if let Some(result) = &details.job.result {
            section.card { h2 { "Result" } pre.body { code { (pretty_body(result)) } } }
        }
        @if !details.deliveries.is_empty() {
            section.card {
                h2 { "Deliveries" }
                table { tbody {
                    @for delivery in &details.deliveries {
                        tr { td { (delivery.group.as_str()) } td { (state_badge(delivery.details.job.state)) }
                             td { "attempt " (delivery.details.job.attempt) } }
                    }
                } }
            }
        }
        @if viewer.can_act { (actions(&viewer, &details.job)) }
    };
    layout::page(&viewer, id.as_str(), false, body)
}

fn fields(job: &Job) -> Markup {
    let now = Timestamp::now();
    let millis = |duration: std::time::Duration| format!("{} ms", count(duration.as_millis() as u64));
    let backoff: Vec<String> = job.retry_backoff.iter().map(|delay| delay.as_millis().to_string()).collect();
    html! {
        dl.fields {
            dt { "id" } dd data-field="id" { (job.id.as_str()) }
            dt { "topic" } dd { a href=(format!("/console/topics/{}", job.topic.as_str())) { (job.topic.as_str()) } }
            dt { "state" } dd data-field="state" { (job.state.as_str()) }
            dt { "due (runAt)" } dd { (instant(job.run_at)) " (" (relative(job.run_at, now)) ")" }
            dt { "attempt" } dd data-field="attempt" { (job.attempt) " of " (job.max_retries.saturating_add(1)) }
            dt { "createTime" } dd { (instant(job.create_time)) }
            dt { "delay" } dd { (millis(job.delay)) }
            dt { "ttr" } dd { (millis(job.ttr)) }
            dt { "priority" } dd { (job.priority) }
            dt { "maxRetries" } dd { (job.max_retries) }
            dt { "retryBackoff" } dd { @if backoff.is_empty() { "default" } @else { (backoff.join(", ")) " ms" } }
            dt { "ttl" } dd { @if job.ttl.is_zero() { "never" } @else { (millis(job.ttl)) } }
            dt { "subtopic" } dd { (job.subtopic.as_deref().unwrap_or("–")) }
            dt { "bizKey" } dd data-field="bizKey" { (job.biz_key.as_deref().unwrap_or("–")) }
            dt { "groups" } dd { @if job.groups.is_empty() { "all" } @else {
                (job.groups.iter().map(|group| group.as_str()).collect::<Vec<_>>().join(", ")) } }
            dt { "last change" } dd { (instant(job.updated_at)) }
        }
    }
}

fn timeline(details: &JobDetails) -> Markup {
    html! {
        ol.timeline {
            @for entry in &details.history {
                li class=(format!("state-{}", entry.state.as_str())) {
                    (state_badge(entry.state))
                    " attempt " (entry.attempt) " · " time { (instant(entry.at)) } " · " span.node { (entry.node) }
                }
            }
        }
    }
}

/// The body as JSON, indented, when it is JSON; else as it is.
fn pretty_body(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .filter(|value| value.is_object() || value.is_array())
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| body.to_owned())
}

/// The actions the job's state allows.
fn actions(viewer: &Viewer, job: &Job) -> Markup {
    let base = format!("/console/jobs/{}", job.id.as_str());
    let can_reschedule = matches!(job.state, JobState::Delay | JobState::Ready);
    let due = instant(job.run_at);
    html! {
        section.card.actions {
            h2 { "Actions" }
            div.buttons {
                @if job.state == JobState::Delay { (action_button(viewer, &format!("{base}/run"), "Run now", None)) }
                @if job.state == JobState::Dead {
                    (action_button(viewer, &format!("{base}/retry"), "Retry", None))
                }
                @if job.state.is_live() {
                    (action_button(viewer, &format!("{base}/delete"), "Delete", Some("Delete this job?")))
                }
            }
            @if can_reschedule {
                form.action.reschedule method="post" action=(format!("{base}/reschedule")) {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    label { "New due time (UTC) "
                        input type="text" name="runAt" value=(due.trim_end_matches('Z')) pattern=(RUN_AT_PATTERN) required;
                    }
                    button type="submit" { "Change the due time" }
                }
            }
            @if !job.state.is_live() && job.state != JobState::Dead { p { "An ended job has no action." } }
        }
    }
}
