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
//! - [`server`]: [`RpcConfig`], [`service`] and [`serve`], what the binary wires.
//! - `handlers`: the unary operations.
//! - `subscribe`: the streaming subscription and its flow control.
//! - `convert`: proto messages to and from the job model.
//! - `auth`: bearer tokens in the `authorization` metadata.
//! - `status`: the one place where a failure becomes a gRPC status.

mod auth;
mod convert;
mod handlers;
pub mod pb;
pub mod server;
mod status;
mod subscribe;

pub use server::{serve, service, service_with_shutdown, RpcConfig, RpcServer, DEFAULT_MAX_MESSAGE_BYTES};
pub use status::code_of;
