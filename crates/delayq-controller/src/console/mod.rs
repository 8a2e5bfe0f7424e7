//! The web console at `/console`: server-rendered pages (maud templates
//! compiled into the binary) and form actions over the same `DelayQueue` the
//! JSON routes call, behind the same tokens.
//!
//! Layout:
//! - `session`: the token cookie, the CSRF token of every form, who may act.
//! - `layout`: the page frame, navigation, messages and error pages.
//! - `pages`: the overview and the topics.
//! - `jobs`: a topic's jobs in a state, search, and one job.
//! - `actions`: the POSTs (pause, resume, retry, run now, delete, ...).
//! - `charts`: the server-drawn SVG charts.
//! - `forwarding`: the forwarding routes and what they did.
//! - `assets`: the hand-written stylesheet and script.

// An `Err(Response)` here is the page sent instead of the one asked for, made
// once per refused request and returned straight to axum: boxing it buys nothing.
#![allow(clippy::result_large_err)]

mod actions;
mod assets;
mod charts;
mod forwarding;
mod jobs;
mod layout;
mod pages;
mod session;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue};
use axum::middleware;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

pub use self::forwarding::{ForwardingProvider, RouteSummary};
use crate::app::AppState;
use crate::limits;

/// The largest body of a console form: a token, an id or a due time.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The console's routes, all under `/console`.
pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/console", get(pages::overview))
        .route("/console/topics", get(pages::topics))
        .route("/console/topics/{topic}", get(pages::topic))
        .route("/console/topics/{topic}/jobs", get(jobs::list))
        .route("/console/jobs/{id}", get(jobs::job))
        .route("/console/search", get(jobs::search))
        .route("/console/forwarding", get(forwarding::page))
        .route("/console/login", get(session::login_page).post(session::login))
        .route("/console/logout", post(session::logout))
        .route("/console/assets/console.css", get(assets::stylesheet))
        .route("/console/assets/console.js", get(assets::script))
        .route("/console/clear", post(actions::clear_all))
        .route("/console/topics/{topic}/pause", post(actions::pause))
        .route("/console/topics/{topic}/resume", post(actions::resume))
        .route("/console/topics/{topic}/dead/retry", post(actions::retry_dead))
        .route("/console/topics/{topic}/dead/delete", post(actions::delete_dead))
        .route("/console/jobs/{id}/delete", post(actions::delete_job))
        .route("/console/jobs/{id}/run", post(actions::run_now))
        .route("/console/jobs/{id}/retry", post(actions::retry_job))
        .route("/console/jobs/{id}/reschedule", post(actions::reschedule))
        .route_layer(middleware::from_fn_with_state(state.clone(), limits::limit_request_time))
        .layer(middleware::map_response(protect))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
}

/// What every console response tells the browser: load scripts, styles and
/// forms from this origin only, never inside another site's frame (no
/// clickjacking), no sniffing, no referrer to other sites, and keep no copy
/// of a page (the assets set their own caching).
async fn protect(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
