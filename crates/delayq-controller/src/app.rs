//! The router and the state every handler shares.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::{Extension, Router};
use delayq_common::auth::{Access, Tokens};
use delayq_queue::DelayQueue;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::ToSchema;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use crate::console::{self, ForwardingProvider};
use crate::limits::{self, BodyLimit, RouteLimits};
use crate::openapi::{self, Document};
use crate::{admin, auth, consumers, groups, jobs, layers, operators, ops, youzan};

/// The default largest request body, in bytes: room for a full batch of small jobs.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = delayq_common::defaults::DEFAULT_MAX_REQUEST_BYTES;
/// The default longest time a request may take (long polls get their wait on top).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The default largest `result` of a finish, in bytes.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;

/// What the REST face needs from configuration.
#[derive(Clone)]
pub struct ControllerConfig {
    /// Bearer tokens accepted on every route but `/health`. Auth is off when
    /// this and `admin_tokens` are both empty.
    pub tokens: Vec<String>,
    /// Bearer tokens that may also call the admin routes (`/reStore`,
    /// `/reStoreJob`, `/clearAll`); they are accepted everywhere else too.
    pub admin_tokens: Vec<String>,
    /// The largest request body of any route; larger requests get `413`.
    /// Routes that read a body have smaller limits sized from the job and
    /// result limits.
    pub max_request_bytes: usize,
    /// The largest `result` of a finish, in bytes; larger ones get `413`.
    pub max_result_bytes: usize,
    /// How long a request may take before it is answered `503`; the
    /// long polls (`/pop`, `GET /topic/{topic}/job`) get their longest wait on top.
    pub request_timeout: Duration,
    /// The handle `/metrics` renders; the binary installs its recorder.
    pub metrics: PrometheusHandle,
    /// The web console at `/console`.
    pub console: ConsoleOptions,
}

/// What the web console needs from configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsoleOptions {
    /// Serves `/console`; off, those paths are not routed.
    pub enabled: bool,
    /// Hides every action and refuses every state-changing console request.
    pub read_only: bool,
}

impl Default for ConsoleOptions {
    fn default() -> ConsoleOptions {
        ConsoleOptions { enabled: true, read_only: false }
    }
}

impl ControllerConfig {
    /// Creates a configuration with auth off and the default request limit.
    pub fn new(metrics: PrometheusHandle) -> ControllerConfig {
        ControllerConfig {
            tokens: Vec::new(),
            admin_tokens: Vec::new(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            metrics,
            console: ConsoleOptions::default(),
        }
    }
}

impl fmt::Debug for ControllerConfig {
    /// Shows how many tokens there are, never the tokens.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerConfig")
            .field("tokens", &self.tokens.len())
            .field("admin_tokens", &self.admin_tokens.len())
            .field("max_request_bytes", &self.max_request_bytes)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("request_timeout", &self.request_timeout)
            .field("console", &self.console)
            .finish_non_exhaustive()
    }
}

/// This node's place in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Runs the timers and forwarders.
    Leader,
    /// Serves the API while another node leads.
    Follower,
    /// A single node without coordination.
    Standalone,
    /// Configured for coordination but cut off from it: serves the API, runs no leader work.
    Disconnected,
}

/// The role, leader and members `/stats` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct RoleInfo {
    /// This node's role.
    pub role: Role,
    /// The leader's node name, when known.
    pub leader: Option<String>,
    /// The names of the nodes taking part.
    pub members: Vec<String>,
    /// The coordination service (`zookeeper`), when one is configured; `/ready` reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<&'static str>,
}

impl RoleInfo {
    /// Describes a standalone node named `node`.
    pub fn standalone(node: impl Into<String>) -> RoleInfo {
        let node = node.into();
        RoleInfo { role: Role::Standalone, leader: Some(node.clone()), members: vec![node], coordinator: None }
    }
}

/// Where `/stats` reads the role from: called on every request, so it must be
/// cheap (e.g. `move || receiver.borrow().clone()` over a `watch` channel).
pub type RoleProvider = Arc<dyn Fn() -> RoleInfo + Send + Sync>;

/// The state shared by every handler.
///
/// One `Arc`: axum clones the state for every extractor and middleware of
/// every request, and one shared counter is cheaper to bump than three.
#[derive(Clone)]
pub struct AppState {
    shared: Arc<SharedState>,
}

/// What [`AppState`] shares.
#[derive(Clone)]
pub struct SharedState {
    /// The queue every operation goes to.
    pub(crate) queue: Arc<DelayQueue>,
    /// Auth, limits and the metrics handle.
    pub(crate) config: Arc<ControllerConfig>,
    /// The digests of the configured tokens.
    pub(crate) tokens: Tokens,
    /// The current role, for `/stats`.
    pub(crate) role: RoleProvider,
    /// The forwarding routes and what they did, for the console.
    pub(crate) forwarding: ForwardingProvider,
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.shared
    }
}

impl AppState {
    /// Creates the state of a standalone node (use [`AppState::with_role`] in a cluster).
    pub fn new(queue: Arc<DelayQueue>, config: ControllerConfig) -> AppState {
        let standalone = RoleInfo { role: Role::Standalone, leader: None, members: Vec::new(), coordinator: None };
        let role: RoleProvider = Arc::new(move || standalone.clone());
        let tokens = Tokens::new(&config.tokens, &config.admin_tokens);
        let forwarding: ForwardingProvider = Arc::new(Vec::new);
        AppState { shared: Arc::new(SharedState { queue, config: Arc::new(config), tokens, role, forwarding }) }
    }

    /// Replaces where the console reads the forwarding routes from.
    pub fn with_forwarding(self, forwarding: ForwardingProvider) -> AppState {
        AppState { shared: Arc::new(SharedState { forwarding, ..SharedState::clone(&self.shared) }) }
    }

    /// Replaces the role provider.
    pub fn with_role(self, role: RoleProvider) -> AppState {
        AppState { shared: Arc::new(SharedState { role, ..SharedState::clone(&self.shared) }) }
    }

    /// Returns the queue.
    pub fn queue(&self) -> &Arc<DelayQueue> {
        &self.shared.queue
    }
}

/// Builds the REST API of docs/api.md over `state`, with its OpenAPI document
/// at `/openapi.json`.
///
/// Every route comes from an annotated handler, so the router and the
/// document are made from one list and cannot disagree.
pub fn router(state: AppState) -> Router {
    let body_limits = RouteLimits::new(
        state.queue.settings().limits.max_body_bytes,
        state.config.max_result_bytes,
        state.config.max_request_bytes,
    );
    let document = Document::default();
    let open_routes = OpenApiRouter::default()
        .routes(routes!(ops::health))
        .routes(routes!(openapi::serve_document).map(|method_router| method_router.layer(Extension(document.clone()))));
    let (routes, api) = OpenApiRouter::with_openapi(openapi::frame())
        .merge(open_routes)
        .merge(guarded(user_routes(body_limits), &state, Access::User))
        .merge(guarded(admin_routes(), &state, Access::Admin))
        // A route layer sees the matched route, which tells long polls apart.
        .route_layer(middleware::from_fn_with_state(state.clone(), limits::limit_request_time))
        .split_for_parts();
    document.publish(&openapi::complete(api));
    // The console is pages, not API: it stays out of the OpenAPI document.
    let routes = if state.config.console.enabled { routes.merge(console::routes(&state)) } else { routes };
    routes
        .fallback(layers::route_not_found)
        .method_not_allowed_fallback(layers::method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limits.other.0))
        .layer(CatchPanicLayer::custom(layers::panic_response))
        .layer(middleware::from_fn(layers::record_http_metrics))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Puts `routes` behind the token guard for `access`, and says so in their
/// part of the document.
fn guarded(mut routes: OpenApiRouter<AppState>, state: &AppState, access: Access) -> OpenApiRouter<AppState> {
    openapi::mark_guarded(routes.get_openapi_mut(), access);
    let state = state.clone();
    match access {
        Access::User => routes.route_layer(middleware::from_fn_with_state(state, auth::require_token)),
        Access::Admin => routes.route_layer(middleware::from_fn_with_state(state, auth::require_admin)),
    }
}

/// Gives the routes of `method_router` a body limit of their own.
fn with_body_limit(method_router: UtoipaMethodRouter<AppState>, limit: BodyLimit) -> UtoipaMethodRouter<AppState> {
    method_router.map(|method_router| method_router.layer(Extension(limit)))
}

fn user_routes(body_limits: RouteLimits) -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(with_body_limit(routes!(jobs::push), body_limits.push))
        .routes(with_body_limit(routes!(jobs::push_batch), body_limits.batch))
        .routes(routes!(jobs::pop))
        .routes(with_body_limit(routes!(jobs::finish), body_limits.finish))
        .routes(routes!(jobs::nack))
        .routes(routes!(jobs::touch))
        .routes(routes!(jobs::delete))
        .routes(routes!(jobs::find))
        .routes(routes!(jobs::get_job))
        .routes(routes!(operators::run_now))
        .routes(routes!(operators::retry))
        .routes(routes!(operators::retry_dead_of_topic))
        .routes(routes!(operators::delete_dead_of_topic))
        .routes(routes!(operators::pause))
        .routes(routes!(operators::resume))
        .routes(routes!(groups::declare_group, groups::drop_group))
        .routes(routes!(groups::list_groups))
        .routes(with_body_limit(routes!(youzan::push), body_limits.push))
        .routes(routes!(youzan::pop))
        .routes(with_body_limit(routes!(youzan::finish), body_limits.finish))
        .routes(routes!(youzan::delete))
        .routes(routes!(consumers::heartbeat))
        .routes(routes!(ops::stats))
        .routes(routes!(ops::ready))
        .routes(routes!(ops::metrics))
}

fn admin_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(admin::restore))
        .routes(routes!(admin::restore_job))
        .routes(routes!(admin::clear_all))
}
