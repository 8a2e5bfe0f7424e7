//! Forwards due jobs into the business system's own messaging: RabbitMQ,
//! Kafka, HTTP webhooks, or the log. The consumer never polls; at-least-once,
//! every message carries the job id for dedupe.
//!
//! Must not decide scheduling: the forwarder is a client of [`DelayQueue`]
//! (reserve, finish, nack) like any consumer.
//!
//! Layout:
//! - [`sink`]: the [`Sink`] trait, the message headers and destination [`Template`]s.
//! - [`route`]: topic patterns and the [`RouteTable`] (first match wins).
//! - [`sinks`]: the sinks (log, webhook, RabbitMQ, Kafka) and [`build_sink`].
//! - [`forwarder`]: the loop that reserves, publishes, finishes or nacks.
//! - [`metrics`]: the metric names, labelled by `sink`.
//! - `testsuite` (feature `testsuite`): the conformance checks every sink passes.
//!
//! [`DelayQueue`]: delayq_queue::DelayQueue

// A broker reply, a job's content or the network must never panic the forwarder.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing))]

pub mod error;
pub mod forwarder;
pub mod metrics;
pub mod route;
pub mod sink;
pub mod sinks;
#[cfg(feature = "testsuite")]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test support: a failed check panics"
)]
pub mod testsuite;

pub use error::SinkError;
pub use forwarder::{run_forwarder, run_forwarder_fenced};
pub use route::{Route, RouteCounters, RouteTable, TopicPattern};
pub use sink::{message_headers, Sink, Template};
pub use sinks::{
    build_sink, webhook_signature, KafkaSink, LogSink, RabbitSink, SinkSpec, WebhookSink, SIGNATURE_HEADER,
};
