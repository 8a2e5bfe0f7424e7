//! The delayq job model shared by every crate: jobs, their states and legal
//! transitions, the validation of a push, ids and the error kinds.
//!
//! Must not do I/O.
//!
//! Layout:
//! - [`time`]: epoch-millisecond instants ([`Timestamp`]) and where they are read ([`Clock`]).
//! - [`name`]: validated names ([`JobId`], [`Topic`]).
//! - [`snowflake`]: the 64-bit id generator.
//! - [`state`]: [`JobState`] and its state machine.
//! - [`job`]: the [`Job`] record and its retry arithmetic.
//! - [`push`]: parsing and validating a push request ([`PushRequest`]).
//! - [`error`]: [`ErrorKind`], the one classification of failures.
//! - [`auth`]: bearer tokens, compared in constant time ([`auth::Tokens`]).
//! - [`redact`]: hiding secrets (URL passwords, secret-looking keys) in what is printed.
//! - [`template`]: forwarding routes' destination templates.
//! - [`defaults`]: defaults and bounds the configuration shares with the crates applying them.

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

pub mod auth;
pub mod defaults;
pub mod error;
pub mod job;
pub mod name;
pub mod push;
pub mod redact;
pub mod snowflake;
pub mod state;
pub mod template;
pub mod time;

pub use error::{ErrorKind, InvalidField};
pub use job::{Job, RetryPolicy};
pub use name::{ConsumerName, Group, JobId, Topic};
pub use push::{Due, JobDefaults, Limits, PushInput, PushRequest, TimeUnit};
pub use snowflake::Snowflake;
pub use state::JobState;
pub use time::{Clock, Timestamp};
