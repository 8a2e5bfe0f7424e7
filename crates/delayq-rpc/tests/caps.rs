//! Caps on what one client can hold open: calls per connection, Subscribe
//! streams, connections, and connections that never speak.

mod common;

use std::time::Duration;

use common::TestServer;
use delayq_rpc::pb::v1 as pb;
use delayq_rpc::pb::v1::delay_queue_service_client::DelayQueueServiceClient;
use delayq_rpc::RpcConfig;
use tokio::io::AsyncReadExt;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

/// Long enough for an uncapped call to answer many times over.
const HELD_BACK: Duration = Duration::from_millis(500);

async fn subscribe(client: &mut DelayQueueServiceClient<Channel>) -> Result<Streaming<pb::ReservedJob>, tonic::Status> {
    let request = pb::SubscribeRequest { topic: "caps".into(), max_in_flight: Some(1), consumer: None, group: None };
    client.subscribe(request).await.map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_stream_cap_wait_for_a_free_stream() {
    let config = RpcConfig { max_concurrent_streams: 2, ..RpcConfig::default() };
    let server = TestServer::start_with(config).await;
    let mut client = server.client().await;
    let first = subscribe(&mut client).await.expect("first stream");
    let second = subscribe(&mut client).await.expect("second stream");
    let mut stats_client = client.clone();
    let mut stats = tokio::spawn(async move { stats_client.stats(pb::StatsRequest {}).await.map(|_| ()) });
    let waited = tokio::time::timeout(HELD_BACK, &mut stats).await;
    assert!(waited.is_err(), "a third call on the connection waits while two streams are open");
    drop(first);
    let answered = tokio::time::timeout(Duration::from_secs(5), stats).await;
    answered.expect("the call runs once a stream ends").expect("task").expect("stats");
    drop(second);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_streams_past_max_waiters_are_refused() {
    let config = RpcConfig { max_waiters: 2, ..RpcConfig::default() };
    let server = TestServer::start_with(config).await;
    let mut client = server.client().await;
    let first = subscribe(&mut client).await.expect("first stream");
    let _second = subscribe(&mut client).await.expect("second stream");
    let refused = subscribe(&mut client).await.expect_err("a third stream is refused");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("limits.max_waiters"), "{}", refused.message());
    assert!(refused.message().contains("at most 2"), "{}", refused.message());

    // A stream that ends gives its place back.
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match subscribe(&mut client).await {
            Ok(_third) => break,
            Err(status) if status.code() == Code::Unavailable && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("the freed place was not given back: {status:?}"),
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_wait_to_be_accepted() {
    let config = RpcConfig { max_connections: 1, ..RpcConfig::default() };
    let server = TestServer::start_with(config).await;
    let mut first = server.client().await;
    first.stats(pb::StatsRequest {}).await.expect("the first connection is served");
    let mut second = server.client().await;
    let mut waiting = tokio::spawn(async move { second.stats(pb::StatsRequest {}).await.map(|_| ()) });
    let waited = tokio::time::timeout(HELD_BACK, &mut waiting).await;
    assert!(waited.is_err(), "a second connection waits while the first is open");
    drop(first);
    let answered = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    answered.expect("served once the first connection closes").expect("task").expect("stats");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_speaks_is_closed() {
    let config = RpcConfig { header_read_timeout: Duration::from_millis(300), ..RpcConfig::default() };
    let server = TestServer::start_with(config).await;
    let mut silent = tokio::net::TcpStream::connect(server.addr).await.expect("connect");
    let mut buffer = [0_u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            // The server's own SETTINGS may come first; then the close.
            match silent.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the silent connection is still open");
    server.stop().await;
}
