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
use axum::middleware;
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
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
}
