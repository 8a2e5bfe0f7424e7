//! The accept loop: at most `max_connections` connections at once (further
//! ones wait in the listen backlog), each served by its own task until it
//! closes or the node shuts down.

use std::sync::Arc;
use std::time::Duration;

use delayq_queue::DelayQueue;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::connection;
use crate::shared::Shared;

/// The default cap on open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4_096;
/// The default time a connection may stay silent between commands.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// What the binary configures.
#[derive(Clone, Debug)]
pub struct BeanstalkConfig {
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a connection may take to send its next command (line and
    /// body) or to take a reply; it is closed after that. A `reserve` that
    /// waits for a job is not idle.
    pub idle_timeout: Duration,
}

impl Default for BeanstalkConfig {
    fn default() -> BeanstalkConfig {
        BeanstalkConfig { max_connections: DEFAULT_MAX_CONNECTIONS, idle_timeout: DEFAULT_IDLE_TIMEOUT }
    }
}

/// Serves the beanstalkd protocol on `listener` until `shutdown` is
/// cancelled; then stops accepting, lets each connection end its command,
/// gives back what they hold reserved, and returns once they are all closed.
pub async fn serve(
    listener: TcpListener,
    queue: Arc<DelayQueue>,
    config: BeanstalkConfig,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let shared = Arc::new(Shared::new(queue, config, shutdown.clone()));
    let connections = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: pause rather than spin.
                warn!(error = %error, "beanstalk accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        debug!(%peer, "beanstalk connection");
        let shared = Arc::clone(&shared);
        connections.spawn(async move {
            connection::serve(stream, shared).await;
            drop(permit);
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    shared.resume_paused().await;
    info!("beanstalk listener stopped");
}
