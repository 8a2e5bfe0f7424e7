//! A TCP proxy in front of ZooKeeper that a test can cut (connections reset, as when
//! ZooKeeper restarts) or freeze (a silent partition: sockets stay open, nothing flows).

use std::net::SocketAddr;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The state of the link between the proxied node and ZooKeeper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Bytes flow.
    Up,
    /// Connections are closed and new ones closed at once.
    Down,
    /// Connections stay open but nothing flows (a partition); closed when the link changes.
    Frozen,
}

/// A proxy listening on a local port.
pub struct ZkProxy {
    addr: SocketAddr,
    link: watch::Sender<Link>,
    accept: JoinHandle<()>,
}

impl ZkProxy {
    /// Starts a proxy to `upstream` (a `host:port`) in state `link`.
    pub async fn start(upstream: &str, link: Link) -> ZkProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (link, _) = watch::channel(link);
        let upstream = upstream.split(',').next().unwrap_or_default().to_owned();
        let links = link.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(relay(inbound, upstream.clone(), links.subscribe()));
            }
        });
        ZkProxy { addr, link, accept }
    }

    /// Returns the connect string of the proxy.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// Changes the link state for current and future connections.
    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for ZkProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.link.send_replace(Link::Down);
    }
}

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

/// Waits until the link is no longer `Up`.
async fn leave_up(link: &mut watch::Receiver<Link>) -> Link {
    match link.wait_for(|state| *state != Link::Up).await {
        Ok(state) => *state,
        Err(_) => Link::Down,
    }
}

/// Keeps the caller's sockets open until the link is no longer frozen.
async fn hold_while_frozen(link: &mut watch::Receiver<Link>) {
    let _ = link.wait_for(|state| *state != Link::Frozen).await;
}
