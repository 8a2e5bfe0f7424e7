//! What the binary wires: [`RpcConfig`] and [`serve`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use delayq_queue::DelayQueue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::error;

use crate::auth::Tokens;
use crate::guard::{GuardLayer, Policy};
use crate::limits::MessageLimits;
use crate::listener::{incoming, ConnectionLimits};
use crate::pb::v1::delay_queue_service_server::DelayQueueServiceServer;
use crate::pb::FILE_DESCRIPTOR_SET;
use crate::subscribe::Subscriptions;

pub use crate::handlers::RpcServer;

/// The default largest reply message, in bytes.
pub const DEFAULT_MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;
/// The default largest `result` of a Finish, in bytes.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;
/// The default most Subscribe streams open at once.
pub const DEFAULT_MAX_WAITERS: usize = 4_096;
/// The default most calls in flight on one connection (HTTP/2 streams).
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 256;
/// The default most connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4_096;
/// The default time a new connection has to send the HTTP/2 preface.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time a request message has to arrive in full.
pub const DEFAULT_REQUEST_ARRIVAL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often an idle connection is pinged, so streams of vanished clients end.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest block of request headers: room for a token and the gRPC headers.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// What the gRPC face needs from configuration.
#[derive(Clone)]
pub struct RpcConfig {
    /// Bearer tokens accepted on every call. Auth is off when this and
    /// `admin_tokens` are both empty.
    pub user_tokens: Vec<String>,
    /// Bearer tokens that may also call Restore, RestoreJob and ClearAll; they
    /// are accepted everywhere else too.
    pub admin_tokens: Vec<String>,
    /// The largest reply message sent.
    pub max_reply_bytes: usize,
    /// The largest `result` of a Finish (`limits.max_result_bytes`).
    pub max_result_bytes: usize,
    /// The most Subscribe streams open at once (`limits.max_waiters`).
    pub max_waiters: usize,
    /// The most calls in flight on one connection; a client queues the rest.
    pub max_concurrent_streams: u32,
    /// The most connections open at once; further ones wait to be accepted
    /// (`server.max_connections`).
    pub max_connections: usize,
    /// How long a new connection may take to send the HTTP/2 preface
    /// (`server.header_read_timeout_ms`).
    pub header_read_timeout: Duration,
    /// How long the request message of a call may take to arrive in full
    /// (`server.request_timeout_ms`).
    pub request_arrival_timeout: Duration,
}

impl std::fmt::Debug for RpcConfig {
    /// Counts the tokens rather than printing them.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RpcConfig")
            .field("user_tokens", &self.user_tokens.len())
            .field("admin_tokens", &self.admin_tokens.len())
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("max_waiters", &self.max_waiters)
            .field("max_concurrent_streams", &self.max_concurrent_streams)
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("request_arrival_timeout", &self.request_arrival_timeout)
            .finish()
    }
}

impl Default for RpcConfig {
    /// Auth off, the default limits.
    fn default() -> RpcConfig {
        RpcConfig {
            user_tokens: Vec::new(),
            admin_tokens: Vec::new(),
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            max_waiters: DEFAULT_MAX_WAITERS,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            request_arrival_timeout: DEFAULT_REQUEST_ARRIVAL_TIMEOUT,
        }
    }
}

/// Builds the `delayq.v1.DelayQueueService` service over `queue`; cancelling
/// `streams` ends every Subscribe stream with `UNAVAILABLE` (their
/// unacknowledged jobs come back after their ttr).
fn api_service(
    queue: Arc<DelayQueue>,
    config: &RpcConfig,
    limits: MessageLimits,
    streams: CancellationToken,
) -> DelayQueueServiceServer<RpcServer> {
    let subscriptions = Arc::new(Subscriptions::new(streams, config.max_waiters));
    // The guard holds each method to its own, smaller limit first.
    DelayQueueServiceServer::new(RpcServer::new(queue, subscriptions, config.max_result_bytes))
        .max_decoding_message_size(limits.largest_bytes())
        .max_encoding_message_size(config.max_reply_bytes)
}

/// Serves the API and the reflection service (v1 and v1alpha) on `listener`
/// until `shutdown` completes, then ends the Subscribe streams and drains the
/// calls in flight.
///
/// Every call, reflection included, passes the guard first: its token is
/// checked from the headers and its request message held to the method's
/// limits before anything is decoded.
///
/// # Errors
/// When the server fails.
pub async fn serve(
    listener: TcpListener,
    queue: Arc<DelayQueue>,
    config: RpcConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let streams = CancellationToken::new();
    let limits = MessageLimits {
        max_body_bytes: queue.settings().limits.max_body_bytes,
        max_result_bytes: config.max_result_bytes,
    };
    let policy = Policy {
        tokens: Tokens::new(&config.user_tokens, &config.admin_tokens),
        limits,
        arrival_timeout: config.request_arrival_timeout,
    };
    let api = api_service(queue, &config, limits, streams.clone());
    // The descriptor set is compiled in (and tested); a failure is a build bug,
    // not a reason to refuse to serve the API.
    let reflection_v1 =
        reflection_builder().build_v1().map_err(|cause| error!(error = %cause, "reflection is off")).ok();
    let reflection_v1alpha =
        reflection_builder().build_v1alpha().map_err(|cause| error!(error = %cause, "reflection is off")).ok();
    let connections = incoming(
        listener,
        ConnectionLimits { max_connections: config.max_connections, preface_timeout: config.header_read_timeout },
    );
    tonic::transport::Server::builder()
        .max_concurrent_streams(config.max_concurrent_streams)
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .layer(GuardLayer::new(policy))
        .add_service(api)
        .add_optional_service(reflection_v1)
        .add_optional_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(connections, async move {
            shutdown.await;
            streams.cancel();
        })
        .await
}

fn reflection_builder() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure().register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_descriptor_set_serves_reflection() {
        assert!(super::reflection_builder().build_v1().is_ok());
        assert!(super::reflection_builder().build_v1alpha().is_ok());
    }
}
