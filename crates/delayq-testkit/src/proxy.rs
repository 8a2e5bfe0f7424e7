//! A TCP proxy between the code under test and a real service, for outages
//! the test controls without stopping the service others share.

use std::net::SocketAddr;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The state of the link between the proxied client and the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Bytes flow both ways.
    Up,
    /// Every open connection is closed and new ones are closed at once, as
    /// when the service restarts or its host is gone: the client sees the
    /// failure right away.
    Down,
    /// Connections, open and new, stay open but nothing flows, as in a
    /// network partition: the client learns of it only from its own
    /// timeouts. They are closed when the link changes again.
    Frozen,
}

/// A proxy on a port of 127.0.0.1 that relays to one upstream address in the
/// state the test sets; dropping it closes every connection.
///
/// One `watch` channel carries the state to every relay, so a change reaches
/// the connections already open as well as those to come.
pub struct FaultProxy {
    address: SocketAddr,
    link: watch::Sender<Link>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (a `host:port`, resolved at each
    /// connection) with the link in state `link`.
    ///
    /// # Panics
    /// When no port of 127.0.0.1 can be bound.
    #[allow(clippy::panic, reason = "a test that cannot bind its proxy cannot run; this fails it")]
    pub async fn start(upstream: &str, link: Link) -> FaultProxy {
        let bound = match TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener.local_addr().map(|address| (listener, address)),
            Err(error) => Err(error),
        };
        let (listener, address) = bound.unwrap_or_else(|error| panic!("cannot bind a proxy on 127.0.0.1: {error}"));
        let (link, _) = watch::channel(link);
        let (upstream, links) = (upstream.to_owned(), link.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(relay(inbound, upstream.clone(), links.subscribe()));
            }
        });
        FaultProxy { address, link, accept }
    }

    /// Returns the address the proxied client connects to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Changes the link for the connections open now and for those to come.
    ///
    /// The relays act on it as soon as they next run, so right after a call
    /// a connection may still be closing.
    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Down ends every relay: none outlives the test that started it.
        self.link.send_replace(Link::Down);
    }
}

/// Relays one accepted connection for as long as the link allows.
async fn relay(mut inbound: TcpStream, upstream: String, mut link: watch::Receiver<Link>) {
    let state = *link.borrow_and_update();
    match state {
        Link::Down => return,
        Link::Frozen => return hold_while_frozen(&mut link).await,
        Link::Up => {}
    }
    let Ok(mut outbound) = TcpStream::connect(&upstream).await else {
        return;
    };
    let next = tokio::select! {
        _ = copy_bidirectional(&mut inbound, &mut outbound) => return,
        next = leave_up(&mut link) => next,
    };
    if next == Link::Frozen {
        hold_while_frozen(&mut link).await;
    }
}

/// Waits until the link is no longer `Up`; a dropped proxy counts as `Down`.
async fn leave_up(link: &mut watch::Receiver<Link>) -> Link {
    match link.wait_for(|state| *state != Link::Up).await {
        Ok(state) => *state,
        Err(_) => Link::Down,
    }
}

/// Keeps the caller's sockets open, and silent, until the link is no longer frozen.
async fn hold_while_frozen(link: &mut watch::Receiver<Link>) {
    let _ = link.wait_for(|state| *state != Link::Frozen).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Starts a server that echoes every byte back; returns its address.
    async fn echo_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut reader, mut writer) = stream.split();
                    let _ = tokio::io::copy(&mut reader, &mut writer).await;
                });
            }
        });
        address
    }

    /// Sends `byte` and returns what came back within 300 ms: `Some(byte)`
    /// echoed, `None` for a closed connection, `Err` for silence.
    async fn round_trip(stream: &mut TcpStream, byte: u8) -> Result<Option<u8>, tokio::time::error::Elapsed> {
        let _ = stream.write_all(&[byte]).await;
        let mut answer = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut answer)).await?;
        Ok(match read {
            Ok(1) => Some(answer[0]),
            _ => None,
        })
    }

    /// Starts a proxy to an echo server and a connection through it that
    /// bytes are seen to flow on.
    async fn proxy_and_open_connection() -> (FaultProxy, TcpStream) {
        let proxy = FaultProxy::start(&echo_server().await, Link::Up).await;
        let mut open = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut open, 7).await, Ok(Some(7)), "bytes flow while the link is up");
        (proxy, open)
    }

    #[tokio::test]
    async fn an_up_link_relays_and_a_down_link_closes_and_refuses() {
        let (proxy, mut open) = proxy_and_open_connection().await;

        proxy.set(Link::Down);
        assert_eq!(round_trip(&mut open, 8).await, Ok(None), "the open connection is closed");
        let mut refused = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut refused, 9).await, Ok(None), "a new connection is closed at once");

        proxy.set(Link::Up);
        let mut again = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut again, 10).await, Ok(Some(10)), "bytes flow again once mended");
    }

    #[tokio::test]
    async fn a_frozen_link_is_silent_until_it_changes_then_closes() {
        let (proxy, mut open) = proxy_and_open_connection().await;

        proxy.set(Link::Frozen);
        assert!(round_trip(&mut open, 2).await.is_err(), "nothing flows on a frozen connection");
        let mut new = TcpStream::connect(proxy.address()).await.unwrap();
        assert!(round_trip(&mut new, 3).await.is_err(), "nor on one opened while frozen");

        proxy.set(Link::Up);
        assert_eq!(round_trip(&mut open, 4).await, Ok(None), "a frozen connection is closed once thawed");
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_its_connections() {
        let (proxy, mut open) = proxy_and_open_connection().await;
        drop(proxy);
        assert_eq!(round_trip(&mut open, 6).await, Ok(None));
    }
}
