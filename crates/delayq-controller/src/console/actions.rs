//! The console's state-changing requests: each a form POST carrying the CSRF
//! token, checked as the matching REST route checks its token (admin-only
//! where the route is), mapped onto the same `DelayQueue` operation, and
//! answered with a redirect to the page it came from.

use axum::extract::rejection::{FormRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Form;
use delayq_common::{JobId, Timestamp, Topic};
use serde::Deserialize;

use super::layout;
use super::pages::topic_of;
use super::session::{actor, see_other};
use crate::app::AppState;
use crate::extract::parse_job_id;

/// What every action form carries.
#[derive(Deserialize)]
pub(crate) struct ActionForm {
    #[serde(default)]
    csrf: String,
    /// The new due time of a reschedule, UTC (`2030-01-31T12:00:00`).
    #[serde(default, rename = "runAt")]
    run_at: Option<String>,
}

type FormResult = Result<Form<ActionForm>, FormRejection>;
type PathResult = Result<Path<String>, PathRejection>;

/// Checks the request and returns its form, or the response refusing it.
fn checked(state: &AppState, headers: &HeaderMap, form: FormResult, admin: bool) -> Result<ActionForm, Response> {
    let form = match form {
        Ok(Form(form)) => form,
        // Too large is 413, anything else 400.
        Err(rejection) => return Err(layout::error_page(rejection.status(), "the form is not valid")),
    };
    actor(state, headers, &form.csrf, admin)?;
    Ok(form)
}

/// A topic action: checks, runs `operation`, goes back to the topic with `done`.
async fn on_topic<F, Fut, T>(
    state: AppState,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
    done: &str,
    operation: F,
) -> Response
where
    F: FnOnce(AppState, Topic) -> Fut,
    Fut: std::future::Future<Output = Result<T, delayq_queue::QueueError>>,
{
    if let Err(refusal) = checked(&state, &headers, form, false) {
        return refusal;
    }
    let topic = match topic_of(path) {
        Ok(topic) => topic,
        Err(refusal) => return refusal,
    };
    match operation(state, topic.clone()).await {
        Ok(_) => see_other(&format!("/console/topics/{}?done={done}", topic.as_str())),
        Err(error) => layout::api_error_page(error),
    }
}

/// `POST /console/topics/{topic}/pause`, as `POST /topics/{topic}/pause`.
pub(crate) async fn pause(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
) -> Response {
    on_topic(state, headers, path, form, "paused", |state, topic| async move { state.queue.pause(&topic).await }).await
}

/// `POST /console/topics/{topic}/resume`, as `POST /topics/{topic}/resume`.
pub(crate) async fn resume(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
) -> Response {
    on_topic(state, headers, path, form, "resumed", |state, topic| async move { state.queue.resume(&topic).await })
        .await
}

/// `POST /console/topics/{topic}/dead/retry`, as `POST /topics/{topic}/dead/retry`.
pub(crate) async fn retry_dead(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
) -> Response {
    on_topic(state, headers, path, form, "retried-dead", |state, topic| async move {
        state.queue.retry_dead_of_topic(&topic).await
    })
    .await
}

/// `POST /console/topics/{topic}/dead/delete`, as `POST /topics/{topic}/dead/delete`.
pub(crate) async fn delete_dead(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
) -> Response {
    on_topic(state, headers, path, form, "deleted-dead", |state, topic| async move {
        state.queue.delete_dead_of_topic(&topic).await
    })
    .await
}

/// A job action: checks, runs `operation`, goes back to the job with `done`.
async fn on_job<F, Fut, T>(
    state: AppState,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
    done: &str,
    operation: F,
) -> Response
where
    F: FnOnce(AppState, JobId, ActionForm) -> Fut,
    Fut: std::future::Future<Output = Result<T, Response>>,
{
    let form = match checked(&state, &headers, form, false) {
        Ok(form) => form,
        Err(refusal) => return refusal,
    };
    let Ok(Path(id)) = path else {
        return layout::error_page(StatusCode::BAD_REQUEST, "the job id is not valid");
    };
    let id = match parse_job_id("id", &id) {
        Ok(id) => id,
        Err(error) => return layout::api_error_page(error),
    };
    match operation(state, id.clone(), form).await {
        Ok(_) => see_other(&format!("/console/jobs/{}?done={done}", id.as_str())),
        Err(refusal) => refusal,
    }
}

/// `POST /console/jobs/{id}/delete`, as `/delete?jobId=`.
pub(crate) async fn delete_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
) -> Response {
    on_job(state, headers, path, form, "deleted", |state, id, _| async move {
        state.queue.delete(&id).await.map_err(layout::api_error_page)
    })
    .await
}

/// `POST /console/jobs/{id}/run`, as `POST /jobs/{id}/run`.
pub(crate) async fn run_now(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
) -> Response {
    on_job(state, headers, path, form, "run", |state, id, _| async move {
        state.queue.run_now(&id).await.map_err(layout::api_error_page)
    })
    .await
}

/// `POST /console/jobs/{id}/retry`, as `POST /jobs/{id}/retry`.
pub(crate) async fn retry_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
) -> Response {
    on_job(state, headers, path, form, "retried", |state, id, _| async move {
        state.queue.retry_dead(&id).await.map_err(layout::api_error_page)
    })
    .await
}

/// `POST /console/jobs/{id}/reschedule`: a new due time, as a push with `replace`.
pub(crate) async fn reschedule(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathResult,
    form: FormResult,
) -> Response {
    on_job(state, headers, path, form, "rescheduled", |state, id, form| async move {
        let run_at = parse_utc(form.run_at.as_deref().unwrap_or(""))?;
        state.queue.reschedule(&id, run_at).await.map_err(layout::api_error_page)
    })
    .await
}

/// `POST /console/clear`, as `/clearAll`: admin-only.
pub(crate) async fn clear_all(State(state): State<AppState>, headers: HeaderMap, form: FormResult) -> Response {
    if let Err(refusal) = checked(&state, &headers, form, true) {
        return refusal;
    }
    match state.queue.clear_all().await {
        Ok(_) => see_other("/console?done=cleared"),
        Err(error) => layout::api_error_page(error),
    }
}

/// Parses a UTC instant as the form sends it: `YYYY-MM-DDTHH:MM[:SS[.mmm]]`,
/// with a space for the `T` and a final `Z` accepted.
fn parse_utc(text: &str) -> Result<Timestamp, Response> {
    let invalid = || layout::error_page(StatusCode::BAD_REQUEST, "runAt must be a UTC time: YYYY-MM-DDTHH:MM:SS");
    let text = text.trim().trim_end_matches('Z');
    if text.len() > 32 {
        return Err(invalid());
    }
    let with_seconds = if text.len() == 16 { format!("{text}:00") } else { text.to_owned() };
    let time = humantime::parse_rfc3339_weak(&with_seconds).map_err(|_| invalid())?;
    let millis = time.duration_since(std::time::UNIX_EPOCH).map_err(|_| invalid())?.as_millis();
    Ok(Timestamp::from_millis(u64::try_from(millis).map_err(|_| invalid())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_parse_with_or_without_seconds() {
        let at = |text: &str| parse_utc(text).ok().map(Timestamp::as_millis);
        assert_eq!(at("1970-01-01T00:01"), Some(60_000));
        assert_eq!(at("1970-01-01 00:01:02"), Some(62_000));
        assert_eq!(at("1970-01-01T00:01:02.500Z"), Some(62_500));
        assert_eq!(at("tomorrow"), None);
        assert_eq!(at(""), None);
    }
}
