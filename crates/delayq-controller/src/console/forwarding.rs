//! The forwarding routes and what each did since this process started.
//!
//! The controller does not know the forwarder (`delayq-forward`); the binary
//! hands it a [`ForwardingProvider`] that reads the routes' counters.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use super::layout::{self, count};
use super::session::viewer;
use crate::app::AppState;

/// One forwarding route as the console shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteSummary {
    /// The route's name (its metrics' `sink` label).
    pub name: String,
    /// The sink type (`log`, `webhook`, `rabbitmq`, `kafka`).
    pub sink: String,
    /// The topic patterns it takes.
    pub topics: Vec<String>,
    /// Jobs the sink confirmed.
    pub published: u64,
    /// Publish attempts that failed.
    pub failed: u64,
    /// Failures after which the broker may hold the message anyway.
    pub unconfirmed: u64,
    /// Jobs that ran out of retries while forwarding.
    pub dead: u64,
    /// Jobs handed to the sink and not yet settled.
    pub in_flight: u64,
}

/// Where the console reads the routes from: called on each view of the page,
/// so it must be cheap (reading counters).
pub type ForwardingProvider = Arc<dyn Fn() -> Vec<RouteSummary> + Send + Sync>;

/// `GET /console/forwarding`.
pub(crate) async fn page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let viewer = match viewer(&state, &headers) {
        Ok(viewer) => viewer,
        Err(login) => return login,
    };
    let routes = (state.forwarding)();
    let body = html! {
        h1 { "Forwarding" }
        @if routes.is_empty() {
            p { "No forwarding route is configured: every topic is pulled by consumers (" code { "/pop" } ", gRPC)." }
        } @else {
            p { "Counts since this process started; the forwarder runs on the leader only." }
            table.routes {
                thead { tr {
                    th { "Route" } th { "Sink" } th { "Topics" } th.num { "Published" } th.num { "Failed" }
                    th.num { "Unconfirmed" } th.num { "Dead" } th.num { "In flight" }
                } }
                tbody {
                    @for route in &routes {
                        tr data-route=(route.name) {
                            td { (route.name) } td { (route.sink) } td { (route.topics.join(", ")) }
                            td.num { (count(route.published)) } td.num { (count(route.failed)) }
                            td.num { (count(route.unconfirmed)) } td.num { (count(route.dead)) }
                            td.num { (count(route.in_flight)) }
                        }
                    }
                }
            }
        }
    };
    layout::page(&viewer, "forwarding", true, body)
}
