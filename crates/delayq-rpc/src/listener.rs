//! The accepted connections: at most a configured number open at once
//! (further ones wait in the listen backlog), and a connection that does not
//! send the HTTP/2 preface within the header-read timeout is closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::warn;

/// The client preface of HTTP/2 and the header of the SETTINGS frame that follows it.
const PREFACE_BYTES: usize = 24 + 9;
/// How long accepting pauses after an error (out of file descriptors, say).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How connections are admitted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionLimits {
    /// The most connections open at once.
    pub(crate) max_connections: usize,
    /// How long a new connection may take to send the HTTP/2 preface.
    pub(crate) preface_timeout: Duration,
}

/// Returns the stream of connections accepted on `listener` within `limits`.
pub(crate) fn incoming(
    listener: TcpListener,
    limits: ConnectionLimits,
) -> impl Stream<Item = Result<Connection, io::Error>> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS)));
    futures::stream::unfold((listener, permits), move |(listener, permits)| async move {
        // The permit is taken before accepting, so connections past the cap
        // wait in the backlog instead of being accepted and starved.
        let permit = Arc::clone(&permits).acquire_owned().await.ok()?;
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    // Small messages (one job) must not wait for Nagle.
                    if let Err(error) = stream.set_nodelay(true) {
                        warn!(error = %error, "could not set TCP_NODELAY");
                    }
                    let connection = Connection::new(stream, permit, limits.preface_timeout);
                    return Some((Ok(connection), (listener, permits)));
                }
                Err(error) => {
                    warn!(error = %error, "accepting a grpc connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    })
}

/// An accepted connection; it holds its place under the cap until dropped.
#[derive(Debug)]
pub(crate) struct Connection {
    stream: TcpStream,
    /// When the preface must have arrived; `None` once it has.
    preface_deadline: Option<Pin<Box<Sleep>>>,
    preface_read: usize,
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    fn new(stream: TcpStream, permit: OwnedSemaphorePermit, preface_timeout: Duration) -> Connection {
        Connection {
            stream,
            preface_deadline: Some(Box::pin(tokio::time::sleep(preface_timeout))),
            preface_read: 0,
            _permit: permit,
        }
    }
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Connection {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if this.preface_deadline.is_none() {
            return polled;
        }
        match polled {
            Poll::Ready(Ok(())) => {
                this.preface_read += buf.filled().len().saturating_sub(before);
                if this.preface_read >= PREFACE_BYTES {
                    this.preface_deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => {
                let expired =
                    this.preface_deadline.as_mut().is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "no HTTP/2 preface in time")));
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
