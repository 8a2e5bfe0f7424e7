//! The background task: connects (retrying with backoff), runs one session after another,
//! and leaves the cluster on cancellation.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use zookeeper_client::{Client, Error as ZkError};

use super::paths::Paths;
use super::session::{Session, SessionEnd};
use super::shared::Shared;
use super::ZkConfig;

/// The first retry delay after a failed connection attempt; it doubles up to the maximum.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(200);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
/// The pause before replacing a session that ended, so a flapping server is not hammered.
const NEW_SESSION_DELAY: Duration = Duration::from_millis(100);

/// Keeps this node in the election until `cancel` fires, then leaves it.
pub(super) async fn run(config: ZkConfig, shared: Arc<Shared>, cancel: CancellationToken) {
    let paths = Paths::new(&config.root, &config.node_name);
    let mut failed_attempts: u32 = 0;
    while !cancel.is_cancelled() {
        let connected = tokio::select! {
            () = cancel.cancelled() => break,
            connected = connect(&config) => connected,
        };
        let client = match connected {
            Ok(client) => client,
            Err(err) => {
                failed_attempts = failed_attempts.saturating_add(1);
                shared.mark_settled();
                let delay = retry_delay(failed_attempts);
                error!(
                    connect = %config.connect,
                    attempt = failed_attempts,
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    cause = %err,
                    "cannot connect to zookeeper, this node does no leader work until it can",
                );
                if sleep_unless_cancelled(delay, &cancel).await {
                    break;
                }
                continue;
            }
        };
        failed_attempts = 0;
        info!(
            session = %client.session_id(),
            timeout_ms = u64::try_from(client.session_timeout().as_millis()).unwrap_or(u64::MAX),
            "zookeeper session established",
        );
        shared.set_client(Some(client.clone()));
        let mut session = Session::new(client, &shared, &paths, &config.node_name, &cancel);
        let end = session.run().await;
        shared.fence();
        shared.set_client(None);
        if end == SessionEnd::Cancelled {
            if tokio::time::timeout(config.session_timeout, session.leave()).await.is_err() {
                warn!("leaving the election timed out, the nodes expire with the session");
            }
            break;
        }
        shared.mark_settled();
        warn!("zookeeper session ended, starting a new one");
        if sleep_unless_cancelled(NEW_SESSION_DELAY, &cancel).await {
            break;
        }
    }
    shared.fence();
    shared.mark_settled();
    info!("left the zookeeper election");
}

/// Opens a new session; fails fast when no server accepts the connection.
async fn connect(config: &ZkConfig) -> Result<Client, ZkError> {
    let connecting =
        Client::connector().with_session_timeout(config.session_timeout).with_fail_eagerly().connect(&config.connect);
    // The client bounds each attempt itself; this only guards against a hang.
    match tokio::time::timeout(config.session_timeout * 2, connecting).await {
        Ok(connected) => connected,
        Err(_) => Err(ZkError::Timeout),
    }
}

/// Returns the delay after `failed_attempts` consecutive failures.
fn retry_delay(failed_attempts: u32) -> Duration {
    let doublings = failed_attempts.saturating_sub(1).min(10);
    FIRST_RETRY_DELAY.saturating_mul(1 << doublings).min(MAX_RETRY_DELAY)
}

/// Sleeps for `delay`; returns true if cancelled meanwhile.
async fn sleep_unless_cancelled(delay: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = cancel.cancelled() => true,
        () = tokio::time::sleep(delay) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_up_to_the_cap() {
        assert_eq!(retry_delay(1), Duration::from_millis(200));
        assert_eq!(retry_delay(2), Duration::from_millis(400));
        assert_eq!(retry_delay(4), Duration::from_millis(1600));
        assert_eq!(retry_delay(30), MAX_RETRY_DELAY);
    }
}
