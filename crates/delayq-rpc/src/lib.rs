//! The delayq gRPC API: the operations of the REST API over tonic, with the
//! same validation and messages, plus a server-streaming `Subscribe` with
//! per-stream flow control. The contract is `proto/delayq.proto`.
//!
//! Must not diverge from the REST semantics: every operation goes to the same
//! [`delayq_queue::DelayQueue`] and fails with the same message.
//!
//! Layout:
//! - [`pb`]: the code generated from the `.proto` (messages, server, client) and
//!   the encoded descriptor set served by reflection.
//! - [`server`]: [`RpcConfig`] and [`serve`], what the binary wires.
//! - `guard`: the layer in front of every route: token, then message limits,
//!   before anything is decoded.
//! - `limits`: what each method may receive; `scan`: the wire-format scan
//!   that enforces it as the body streams in.
//! - `listener`: the cap on open connections and the preface timeout.
//! - `handlers`: the unary operations.
//! - `subscribe`: the streaming subscription, its flow control and its cap.
//! - `convert`: proto messages to and from the job model.
//! - `auth`: bearer tokens, compared in constant time.
//! - `status`: the one place where a failure becomes a gRPC status.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

mod auth;
mod convert;
mod guard;
mod handlers;
mod limits;
mod listener;
pub mod pb;
mod scan;
pub mod server;
mod status;
mod subscribe;

pub use server::{
    serve, RpcConfig, RpcServer, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONCURRENT_STREAMS, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REPLY_BYTES, DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_WAITERS, DEFAULT_REQUEST_ARRIVAL_TIMEOUT,
};
pub use status::code_of;
