//! Starts the gRPC service in-process on 127.0.0.1:0 over a real `DelayQueue`
//! (memory scheduler, SQLite store in a temp dir, the timer and the fan-out running).

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::Snowflake;
use delayq_queue::{run_fan_out, run_timer, DelayQueue, MemoryScheduler, QueueSettings};
use delayq_rpc::pb::v1::delay_queue_service_client::DelayQueueServiceClient;
use delayq_rpc::RpcConfig;
use delayq_store::SqliteStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A running service and what it runs on.
pub struct TestServer {
    pub addr: SocketAddr,
    pub queue: Arc<DelayQueue>,
    stop: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    timer: JoinHandle<()>,
    fan_out: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts a server with auth off.
    pub async fn start() -> TestServer {
        TestServer::start_with(RpcConfig::default()).await
    }

    /// Starts a server with the given configuration.
    pub async fn start_with(config: RpcConfig) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open_in(dir.path(), "rpc-test".into()).await.expect("open sqlite store");
        let queue = Arc::new(DelayQueue::new(
            Arc::new(MemoryScheduler::new()),
            Arc::new(store),
            Snowflake::new(1),
            QueueSettings::default(),
        ));
        let stop = CancellationToken::new();
        let timer = tokio::spawn(run_timer(Arc::clone(&queue), stop.clone()));
        let fan_out = tokio::spawn(run_fan_out(Arc::clone(&queue), stop.clone(), || true));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let shutdown = stop.clone().cancelled_owned();
        let server = tokio::spawn(delayq_rpc::serve(listener, Arc::clone(&queue), config, shutdown));
        TestServer { addr, queue, stop, server, timer, fan_out, _dir: dir }
    }

    /// Returns the `http://host:port` of the server.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connects a new client (its own HTTP/2 connection).
    pub async fn client(&self) -> DelayQueueServiceClient<Channel> {
        let channel = Channel::from_shared(self.url())
            .expect("valid url")
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connect to the rpc server");
        DelayQueueServiceClient::new(channel)
    }

    /// Shuts the server down gracefully and checks that it stops in time.
    pub async fn stop(self) {
        self.stop.cancel();
        let served = tokio::time::timeout(Duration::from_secs(10), self.server)
            .await
            .expect("server stops within 10 s of shutdown");
        served.expect("server task").expect("server ends cleanly");
        self.timer.await.expect("timer task");
        self.fan_out.await.expect("fan-out task");
        self.queue.close().await;
    }
}

/// A push of `body` to `topic`, due now.
pub fn push(topic: &str, body: &str) -> delayq_rpc::pb::v1::PushRequest {
    delayq_rpc::pb::v1::PushRequest { topic: topic.into(), body: Some(body.into()), ..Default::default() }
}

/// Passes request and reply messages through as encoded bytes, so a test can
/// send a message it never builds as structs.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = bytes::Bytes;
    type Decode = bytes::Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: bytes::Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<bytes::Bytes>, tonic::Status> {
        let remaining = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, remaining)))
    }
}

/// Adds `authorization: Bearer <token>` to a request.
pub fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let value = format!("Bearer {token}").parse().expect("ascii metadata");
    request.metadata_mut().insert("authorization", value);
    request
}

/// Calls the unary method at `path` with an already encoded message.
pub async fn raw_unary(
    channel: Channel,
    path: &'static str,
    request: tonic::Request<bytes::Bytes>,
) -> Result<bytes::Bytes, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("channel ready");
    let path = http::uri::PathAndQuery::from_static(path);
    grpc.unary(request, path, RawCodec).await.map(tonic::Response::into_inner)
}

/// Returns the resident set size of this process (where the server runs), in bytes.
pub fn rss_bytes() -> u64 {
    status_kilobytes("VmRSS:") * 1024
}

/// Returns the peak resident set size of this process since the last
/// [`reset_peak_rss`], in bytes: memory the server took and gave back counts too.
pub fn peak_rss_bytes() -> u64 {
    status_kilobytes("VmHWM:") * 1024
}

/// Starts a new peak: from now on [`peak_rss_bytes`] counts from the current size.
pub fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS through /proc/self/clear_refs");
}

fn status_kilobytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status.lines().find(|line| line.starts_with(field)).expect("the field in /proc/self/status");
    line.split_whitespace().nth(1).expect("a value").parse().expect("a number")
}
