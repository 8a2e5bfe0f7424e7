//! What the binary wires: [`RpcConfig`], [`service`] and [`serve`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use delayq_queue::DelayQueue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tracing::error;

use crate::auth::Tokens;
use crate::pb::v1::delay_queue_service_server::DelayQueueServiceServer;
use crate::pb::FILE_DESCRIPTOR_SET;
use crate::subscribe::Subscriptions;

pub use crate::handlers::RpcServer;

/// The default largest request or response message, in bytes: as large as the
/// default REST request limit, room for a full batch of small jobs.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How often an idle connection is pinged, so streams of vanished clients end.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the gRPC face needs from configuration.
#[derive(Clone, Debug)]
pub struct RpcConfig {
    /// Bearer tokens accepted on every call. Auth is off when this and
    /// `admin_tokens` are both empty.
    pub user_tokens: Vec<String>,
    /// Bearer tokens that may also call Restore, RestoreJob and ClearAll; they
    /// are accepted everywhere else too.
    pub admin_tokens: Vec<String>,
    /// The largest message accepted or sent; larger requests get `RESOURCE_EXHAUSTED`.
    pub max_message_bytes: usize,
}

impl Default for RpcConfig {
    /// Auth off, the default message limit.
    fn default() -> RpcConfig {
        RpcConfig { user_tokens: Vec::new(), admin_tokens: Vec::new(), max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES }
    }
}

/// Builds the `delayq.v1.DelayQueueService` service over `queue`.
///
/// Its Subscribe streams end only when their clients leave; use
/// [`service_with_shutdown`] (as [`serve`] does) to end them on shutdown, else a
/// graceful shutdown waits for them.
pub fn service(queue: Arc<DelayQueue>, config: RpcConfig) -> DelayQueueServiceServer<RpcServer> {
    service_with_shutdown(queue, config, CancellationToken::new())
}

/// Builds the service; cancelling `streams` ends every Subscribe stream with
/// `UNAVAILABLE` (their unacknowledged jobs come back after their ttr).
pub fn service_with_shutdown(
    queue: Arc<DelayQueue>,
    config: RpcConfig,
    streams: CancellationToken,
) -> DelayQueueServiceServer<RpcServer> {
    let tokens = Tokens::new(config.user_tokens, config.admin_tokens);
    let subscriptions = Arc::new(Subscriptions::new(streams));
    DelayQueueServiceServer::new(RpcServer::new(queue, tokens, subscriptions))
        .max_decoding_message_size(config.max_message_bytes)
        .max_encoding_message_size(config.max_message_bytes)
}

/// Serves the API and the reflection service (v1 and v1alpha) on `listener`
/// until `shutdown` completes, then ends the Subscribe streams and drains the
/// calls in flight.
///
/// # Errors
/// When the server fails (the listener breaks).
pub async fn serve(
    listener: TcpListener,
    queue: Arc<DelayQueue>,
    config: RpcConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let streams = CancellationToken::new();
    let api = service_with_shutdown(queue, config, streams.clone());
    // The descriptor set is compiled in (and tested); a failure is a build bug,
    // not a reason to refuse to serve the API.
    let reflection_v1 =
        reflection_builder().build_v1().map_err(|cause| error!(error = %cause, "reflection is off")).ok();
    let reflection_v1alpha =
        reflection_builder().build_v1alpha().map_err(|cause| error!(error = %cause, "reflection is off")).ok();
    // Small messages (one job) must not wait for Nagle.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(api)
        .add_optional_service(reflection_v1)
        .add_optional_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(incoming, async move {
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
