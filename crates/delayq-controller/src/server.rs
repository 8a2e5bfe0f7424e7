//! The HTTP/1.1 accept loop: a cap on open connections, a deadline for each
//! request's headers, `TCP_NODELAY`, and a graceful stop.
//!
//! `axum::serve` sets neither a header deadline nor a connection cap, so a
//! client that opens connections and never finishes a request would hold
//! them (and their buffers) for as long as it likes.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// How long to pause accepting after an error such as running out of file descriptors.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The limits of the HTTP listener itself (request limits live in [`crate::ControllerConfig`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// How long a client may take to send a request's headers, counted from
    /// the first read of that request (or from the end of the previous one on
    /// a kept-alive connection). The connection is closed after it.
    pub header_read_timeout: Duration,
    /// The most connections open at once. Further connections are not
    /// accepted (they wait in the kernel's backlog) until one closes.
    pub max_connections: usize,
}

impl HttpLimits {
    /// Builds the limits from milliseconds and a count, as configuration gives them;
    /// zero is raised to the smallest working value.
    pub fn new(header_read_timeout_ms: u64, max_connections: usize) -> HttpLimits {
        HttpLimits {
            header_read_timeout: Duration::from_millis(header_read_timeout_ms.max(1)),
            max_connections: max_connections.max(1),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then stops
/// accepting, lets requests in flight finish, closes idle connections and
/// returns once every connection has closed.
pub async fn serve(listener: TcpListener, app: Router, limits: HttpLimits, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    loop {
        // The slot is taken before accepting, so past the cap a connection is
        // not even accepted, and costs the server nothing but a backlog entry.
        let slot = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_closed) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    pause_after_accept_error(&error).await;
                    continue;
                }
            },
        };
        // Replies go out as soon as they are written. With Nagle's algorithm,
        // the last segment of a reply that spans several waits for the
        // client's ACK, which the client may delay.
        if let Err(error) = stream.set_nodelay(true) {
            debug!(%error, "could not set TCP_NODELAY on an accepted connection");
        }
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                debug!(%error, %peer, "http connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Errors of one connection (reset before it was accepted) need no pause;
/// others (out of file descriptors) would otherwise spin the loop.
async fn pause_after_accept_error(error: &io::Error) {
    let of_one_connection = matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
    );
    if of_one_connection {
        return;
    }
    warn!(%error, "accepting an http connection failed");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}
