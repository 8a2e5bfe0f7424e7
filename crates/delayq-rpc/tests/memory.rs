//! Hostile batches against a server with auth on, in a process of their own so
//! that the peak memory measured is theirs: refused without a token before the
//! message is read, and with a token before it is decoded.

mod common;

use bytes::Bytes;
use common::{peak_rss_bytes, raw_unary, reset_peak_rss, rss_bytes, with_token, TestServer};
use delayq_rpc::RpcConfig;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

const PUSH_BATCH: &str = "/delayq.v1.DelayQueueService/PushBatch";
const TOKEN: &str = "secret";
/// How much the process may grow, at its peak, while it refuses three hostile messages.
const RSS_BUDGET: u64 = 100 * 1024 * 1024;

/// Sends `request()` three times and returns each refusal and the peak growth of the process.
async fn three_calls(channel: &Channel, request: impl Fn() -> Request<Bytes>) -> (Vec<(Code, String)>, u64) {
    reset_peak_rss();
    let before = rss_bytes();
    let mut refusals = Vec::new();
    for _ in 0..3 {
        let outcome = raw_unary(channel.clone(), PUSH_BATCH, request()).await;
        let status: Status = outcome.expect_err("the call must be refused");
        refusals.push((status.code(), status.message().to_owned()));
    }
    (refusals, peak_rss_bytes().saturating_sub(before))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_mib_of_empty_jobs_leave_memory_bounded() {
    let server = TestServer::start_with(RpcConfig { user_tokens: vec![TOKEN.into()], ..RpcConfig::default() }).await;
    let channel = Channel::from_shared(server.url()).expect("url").connect().await.expect("connect");
    // Eight million empty `jobs` entries.
    let message = Bytes::from([0x0a_u8, 0x00].repeat(8 * 1024 * 1024));

    let (refusals, grown) = three_calls(&channel, || Request::new(message.clone())).await;
    let unauthenticated = (Code::Unauthenticated, "authorization is required: Bearer <token>".to_owned());
    assert_eq!(refusals, vec![unauthenticated; 3]);
    assert!(grown < RSS_BUDGET, "without a token the process grew by {} MiB", grown >> 20);

    let (refusals, grown) = three_calls(&channel, || with_token(message.clone(), TOKEN)).await;
    let too_many = (Code::InvalidArgument, "jobs must have at most 1000 entries".to_owned());
    assert_eq!(refusals, vec![too_many; 3]);
    assert!(grown < RSS_BUDGET, "with a token the process grew by {} MiB", grown >> 20);
    server.stop().await;
}
