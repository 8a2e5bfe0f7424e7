//! The delayq REST API of docs/api.md over [`delayq_queue::DelayQueue`]: routes,
//! the `{success, message, data}` envelope, auth, limits and `/metrics`.
//!
//! Must not hold business logic beyond parsing requests and mapping results and errors.
//!
//! Layout:
//! - [`app`]: [`router`], [`AppState`], [`ControllerConfig`] and the role seam ([`RoleProvider`]).
//! - `openapi`: the OpenAPI document built with the router, served at `/openapi.json`;
//!   `schemas` and `params`: the shapes it names that handlers read through other code.
//! - [`error`]: the envelope and [`ApiError`], the one mapping of failures to statuses.
//! - `extract`: query, JSON body and path extractors that reject with an [`ApiError`].
//! - `views`: the JSON shapes of jobs in responses.
//! - `jobs`: push, batch push, pop, finish, nack, touch, delete and lookups
//!   (each with `group=` for one consumer group's delivery).
//! - `groups`: declaring, dropping and listing the consumer groups of a topic.
//! - `youzan`: the `topic/{topic}/job` aliases (durations in seconds).
//! - `admin`: `/reStore`, `/reStoreJob`, `/clearAll`.
//! - `ops`: `/health`, `/ready`, `/stats`, `/metrics`.
//! - `auth`: bearer tokens; [`layers`]: fallbacks, panics, HTTP metrics.
//! - `limits`: per-route body limits and the request timeout.
//! - `batch`: reading a batch push without materializing more than it may hold.
//! - [`server`]: the accept loop: connection cap, header deadline, graceful stop.
//! - [`console`]: the web console at `/console`: server-rendered pages and
//!   actions over the same `DelayQueue`, behind the same tokens.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic))]

pub mod app;
pub mod console;
pub mod error;
pub mod layers;
pub mod server;

mod admin;
mod auth;
mod batch;
mod consumers;
mod extract;
mod groups;
mod jobs;
mod limits;
mod openapi;
mod operators;
mod ops;
mod params;
mod schemas;
mod views;
mod youzan;

pub use app::{
    router, AppState, ConsoleOptions, ControllerConfig, Role, RoleInfo, RoleProvider, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_RESULT_BYTES, DEFAULT_REQUEST_TIMEOUT,
};
pub use console::{ForwardingProvider, RouteSummary};
pub use error::ApiError;
pub use server::{serve, HttpLimits};
