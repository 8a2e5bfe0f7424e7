//! The reflection service lists the API, as grpcurl-style tools need.

mod common;

use common::TestServer;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_the_service() {
    let server = TestServer::start().await;
    let channel = tonic::transport::Channel::from_shared(server.url()).expect("url").connect().await.expect("connect");
    let mut client = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses =
        client.server_reflection_info(tokio_stream::iter(vec![request])).await.expect("reflection").into_inner();
    let response = responses.message().await.expect("a response").expect("one message");
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer: {response:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|service| service.name).collect();
    assert!(names.contains(&"delayq.v1.DelayQueueService".to_owned()), "{names:?}");
    drop(responses);
    server.stop().await;
}
