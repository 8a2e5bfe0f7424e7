//! Hostile requests: tokens are checked before a message is read, and a
//! message is held to what its method can accept before it is decoded (the
//! memory this saves is measured in `memory.rs`).

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{push, raw_unary, with_token, TestServer};
use delayq_rpc::pb::v1 as pb;
use delayq_rpc::RpcConfig;
use prost::Message;
use tonic::transport::Channel;
use tonic::{Code, Request};
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::ServerReflectionRequest;

const PUSH_BATCH: &str = "/delayq.v1.DelayQueueService/PushBatch";
const TOKEN: &str = "secret";

fn auth_on() -> RpcConfig {
    RpcConfig { user_tokens: vec![TOKEN.into()], ..RpcConfig::default() }
}

/// A `PushBatchRequest` of 16 MiB: eight million empty `jobs` entries.
fn sixteen_mib_of_empty_jobs() -> Bytes {
    Bytes::from([0x0a_u8, 0x00].repeat(8 * 1024 * 1024))
}

async fn channel(server: &TestServer) -> Channel {
    Channel::from_shared(server.url()).expect("url").connect().await.expect("connect")
}

fn code_and_message<T>(outcome: Result<T, tonic::Status>) -> (Code, String) {
    match outcome {
        Ok(_) => panic!("the call must be refused"),
        Err(status) => (status.code(), status.message().to_owned()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_before_a_batch_is_read() {
    let server = TestServer::start_with(auth_on()).await;
    let channel = channel(&server).await;
    let message = sixteen_mib_of_empty_jobs();
    let missing = raw_unary(channel.clone(), PUSH_BATCH, Request::new(message.clone())).await;
    let expected = (Code::Unauthenticated, "authorization is required: Bearer <token>".to_owned());
    assert_eq!(code_and_message(missing), expected);
    let wrong = raw_unary(channel.clone(), PUSH_BATCH, with_token(message, "guess")).await;
    assert_eq!(code_and_message(wrong), (Code::Unauthenticated, "token is not valid".to_owned()));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_a_thousand_jobs_is_refused_before_it_is_decoded() {
    let server = TestServer::start_with(auth_on()).await;
    let channel = channel(&server).await;
    let too_many = pb::PushBatchRequest { jobs: vec![push("b", "x"); 1001] }.encode_to_vec();
    let refused = raw_unary(channel.clone(), PUSH_BATCH, with_token(Bytes::from(too_many), TOKEN)).await;
    assert_eq!(code_and_message(refused), (Code::InvalidArgument, "jobs must have at most 1000 entries".to_owned()));

    let message = sixteen_mib_of_empty_jobs();
    let refused = raw_unary(channel.clone(), PUSH_BATCH, with_token(message, TOKEN)).await;
    assert_eq!(code_and_message(refused), (Code::InvalidArgument, "jobs must have at most 1000 entries".to_owned()));

    // A full batch of the largest bodies is still accepted.
    let mut client = server.client().await;
    let body = "x".repeat(65_536);
    let full =
        pb::PushBatchRequest { jobs: vec![pb::PushRequest { delay_ms: Some(60_000), ..push("b", &body) }; 1000] };
    let items = client.push_batch(with_token(full, TOKEN)).await.expect("a full batch").into_inner().items;
    let pushed =
        items.iter().filter(|item| matches!(item.outcome, Some(pb::push_batch_item::Outcome::Pushed(_)))).count();
    assert_eq!(pushed, 1000);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_method_takes_what_it_can_accept() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let huge_push = refusal(client.push(push("t", &"x".repeat(1 << 20))).await);
    assert_eq!(huge_push, (Code::InvalidArgument, "Push request must be at most 77824 bytes".to_owned()));
    let big_delete = pb::DeleteRequest { id: "x".repeat(8 * 1024), ..Default::default() };
    assert_eq!(
        refusal(client.delete(big_delete).await),
        (Code::InvalidArgument, "Delete request must be at most 4096 bytes".to_owned())
    );

    client.push(pb::PushRequest { id: Some("j".into()), ..push("t", "b") }).await.expect("push");
    let popped = client
        .pop(pb::PopRequest { topic: "t".into(), count: Some(1), timeout_ms: Some(2_000), consumer: None, group: None })
        .await;
    assert_eq!(popped.expect("pop").into_inner().jobs.len(), 1);
    let too_long = pb::FinishRequest { id: "j".into(), result: Some("r".repeat(65_537)), attempt: None, group: None };
    let refused = refusal(client.finish(too_long).await);
    assert_eq!(refused, (Code::InvalidArgument, "result must be at most 65536 bytes".to_owned()));
    let huge = pb::FinishRequest { id: "j".into(), result: Some("r".repeat(1 << 20)), attempt: None, group: None };
    assert_eq!(
        refusal(client.finish(huge).await),
        (Code::InvalidArgument, "Finish request must be at most 69632 bytes".to_owned())
    );
    // The refused finishes changed nothing: the job is still reserved and can be finished.
    let longest = pb::FinishRequest { id: "j".into(), result: Some("r".repeat(65_536)), attempt: None, group: None };
    client.finish(longest).await.expect("a result of the largest size");
    server.stop().await;
}

fn refusal<T: std::fmt::Debug>(outcome: Result<T, tonic::Status>) -> (Code, String) {
    code_and_message(outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_needs_a_token_when_auth_is_on() {
    let server = TestServer::start_with(auth_on()).await;
    let mut client = ServerReflectionClient::new(channel(&server).await);
    let list = || ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let anonymous = client.server_reflection_info(tokio_stream::iter(vec![list()])).await;
    let refused = match anonymous {
        Err(status) => status,
        Ok(response) => response.into_inner().message().await.expect_err("no answer without a token"),
    };
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    let allowed = client.server_reflection_info(with_token(tokio_stream::iter(vec![list()]), TOKEN)).await;
    let answer = allowed.expect("reflection with a token").into_inner().message().await.expect("an answer");
    assert!(answer.is_some());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_never_finishes_arriving_is_cut_off() {
    let config = RpcConfig { request_arrival_timeout: Duration::from_millis(300), ..RpcConfig::default() };
    let server = TestServer::start_with(config).await;
    let mut grpc = tonic::client::Grpc::new(channel(&server).await);
    grpc.ready().await.expect("ready");
    // Headers, then a body that never comes.
    let stalled = futures::stream::pending::<Bytes>();
    let path = http::uri::PathAndQuery::from_static("/delayq.v1.DelayQueueService/Stats");
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        grpc.client_streaming(Request::new(stalled), path, common::RawCodec),
    )
    .await
    .expect("the server answers");
    assert_eq!(code_and_message(outcome).0, Code::DeadlineExceeded);
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    server.stop().await;
}
