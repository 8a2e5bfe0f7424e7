//! Consumer groups over gRPC, as over REST: each declared group gets its own
//! delivery of a due job with its own state, `group` picks one delivery, and
//! a delivery is shown with its job's id and topic and its group.

mod common;

use std::time::Duration;

use common::{push, TestServer};
use delayq_rpc::pb::v1 as pb;
use delayq_rpc::pb::v1::delay_queue_service_client::DelayQueueServiceClient;
use tonic::transport::Channel;
use tonic::Code;

fn refusal<T: std::fmt::Debug>(outcome: Result<T, tonic::Status>) -> (Code, String) {
    let status = outcome.expect_err("the call must be refused");
    (status.code(), status.message().to_owned())
}

fn group_request(topic: &str, group: &str) -> pb::GroupRequest {
    pb::GroupRequest { topic: topic.into(), group: group.into() }
}

async fn declare(client: &mut DelayQueueServiceClient<Channel>, topic: &str, groups: &[&str]) {
    for group in groups {
        let declared = client.declare_group(group_request(topic, group)).await.expect("declare").into_inner();
        assert!(declared.created, "{group} is new");
    }
}

/// Pops one delivery of `group`, waiting for the fan-out.
async fn pop_in(client: &mut DelayQueueServiceClient<Channel>, topic: &str, group: &str) -> Vec<pb::ReservedJob> {
    let request = pb::PopRequest {
        topic: topic.into(),
        timeout_ms: Some(5_000),
        group: Some(group.into()),
        ..Default::default()
    };
    client.pop(request).await.expect("pop").into_inner().jobs
}

/// Waits until job `id` is handed to its groups: a delivery may be popped a
/// moment before the fan-out ends the job.
async fn wait_until_handed_out(client: &DelayQueueServiceClient<Channel>, id: &str) {
    let finished = delayq_testkit::eventually(Duration::from_secs(5), || {
        let mut client = client.clone();
        let request = pb::GetJobRequest { id: id.into(), ..Default::default() };
        async move {
            let job = client.get_job(request).await.ok().and_then(|reply| reply.into_inner().job);
            job.is_some_and(|job| job.state == pb::JobState::Finished as i32)
        }
    })
    .await;
    assert!(finished, "job {id} was not handed to its groups");
}

fn finish(id: &str, group: &str) -> pb::FinishRequest {
    pb::FinishRequest { id: id.into(), group: Some(group.into()), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_group_gets_its_own_delivery_with_its_own_state() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    declare(&mut client, "orders", &["billing", "audit"]).await;
    let again = client.declare_group(group_request("orders", "billing")).await.expect("declare again");
    assert!(!again.into_inner().created);
    let listed = client.list_groups(pb::TopicRequest { topic: "orders".into() }).await.expect("list");
    assert_eq!(listed.into_inner().groups, ["audit", "billing"]);

    let pushed = pb::PushRequest { id: Some("order-1".into()), biz_key: Some("k".into()), ..push("orders", "close") };
    client.push(pushed).await.expect("push");
    let billing = pop_in(&mut client, "orders", "billing").await;
    wait_until_handed_out(&client, "order-1").await;
    assert_eq!(billing.len(), 1);
    assert_eq!((billing[0].id.as_str(), billing[0].topic.as_str()), ("order-1", "orders"));
    assert_eq!((billing[0].group.as_deref(), billing[0].biz_key.as_deref()), (Some("billing"), None));

    let subscribe = pb::SubscribeRequest {
        topic: "orders".into(),
        group: Some("audit".into()),
        max_in_flight: Some(1),
        consumer: None,
    };
    let mut stream = client.subscribe(subscribe).await.expect("subscribe").into_inner();
    let streamed = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a delivery in time")
        .expect("stream healthy")
        .expect("a job");
    assert_eq!(
        (streamed.id.as_str(), streamed.topic.as_str(), streamed.group.as_deref()),
        ("order-1", "orders", Some("audit"))
    );

    let finished = client.finish(finish("order-1", "billing")).await.expect("finish").into_inner();
    assert_eq!((finished.id.as_str(), finished.group.as_deref()), ("order-1", Some("billing")));
    let nack =
        pb::NackRequest { id: "order-1".into(), delay_ms: Some(60_000), attempt: Some(1), group: Some("audit".into()) };
    let nacked = client.nack(nack).await.expect("nack").into_inner();
    assert_eq!(
        (nacked.id.as_str(), nacked.group.as_deref(), nacked.state),
        ("order-1", Some("audit"), pb::JobState::Delay as i32)
    );

    let details = client.get_job(pb::GetJobRequest { id: "order-1".into(), ..Default::default() }).await.expect("get");
    let details = details.into_inner();
    let job = details.job.expect("the job");
    assert_eq!((job.state, job.group), (pb::JobState::Finished as i32, None));
    let mut states: Vec<(String, i32, u32)> =
        details.deliveries.iter().map(|delivery| (delivery.group.clone(), delivery.state, delivery.attempt)).collect();
    states.sort();
    assert_eq!(
        states,
        [("audit".to_owned(), pb::JobState::Delay as i32, 2), ("billing".to_owned(), pb::JobState::Finished as i32, 1)]
    );

    let one = pb::GetJobRequest { id: "order-1".into(), group: Some("audit".into()), ..Default::default() };
    let shown = client.get_job(one).await.expect("get delivery").into_inner().job.expect("the delivery");
    assert_eq!((shown.id.as_str(), shown.topic.as_str(), shown.group.as_deref()), ("order-1", "orders", Some("audit")));

    let twice = refusal(client.finish(finish("order-1", "billing")).await);
    assert_eq!(twice, (Code::FailedPrecondition, "job order-1 in group billing is finished, not reserved".to_owned()));
    drop(stream);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_group_and_tell_missing_deliveries_from_missing_jobs() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    declare(&mut client, "mail", &["a", "b"]).await;
    let ungrouped = refusal(client.pop(pb::PopRequest { topic: "mail".into(), ..Default::default() }).await);
    assert_eq!(ungrouped.0, Code::InvalidArgument);
    assert!(ungrouped.1.starts_with("group is required"), "{ungrouped:?}");
    let bad = refusal(client.declare_group(group_request("mail", "a/b")).await);
    assert_eq!(bad, (Code::InvalidArgument, "group may only contain A-Z a-z 0-9 . _ : -".to_owned()));
    let no_topic = refusal(client.declare_group(group_request("", "a")).await);
    assert_eq!(no_topic, (Code::InvalidArgument, "topic is required".to_owned()));

    let only_a = pb::PushRequest { id: Some("for-a".into()), groups: vec!["a".into()], ..push("mail", "b") };
    client.push(only_a).await.expect("push");
    assert_eq!(pop_in(&mut client, "mail", "a").await.len(), 1);
    wait_until_handed_out(&client, "for-a").await;
    let for_b =
        pb::PopRequest { topic: "mail".into(), group: Some("b".into()), timeout_ms: Some(300), ..Default::default() };
    assert!(client.pop(for_b).await.expect("pop b").into_inner().jobs.is_empty(), "b was not named");

    let missing = refusal(client.finish(finish("for-a", "b")).await);
    assert_eq!(missing.0, Code::FailedPrecondition, "{missing:?}");
    assert!(missing.1.contains("group b") && !missing.1.contains("for-a/"), "{missing:?}");
    let ghost = refusal(client.finish(finish("ghost", "a")).await);
    assert_eq!(ghost, (Code::NotFound, "no job ghost".to_owned()));
    let touch = pb::TouchRequest { id: "for-a".into(), group: Some("b".into()), attempt: None };
    assert_eq!(refusal(client.touch(touch).await).0, Code::FailedPrecondition);

    let dropped = refusal(client.drop_group(group_request("mail", "nope")).await);
    assert_eq!(dropped, (Code::NotFound, "topic mail has no group nope".to_owned()));
    client.drop_group(group_request("mail", "b")).await.expect("drop b");

    let stats = client.stats(pb::StatsRequest {}).await.expect("stats").into_inner();
    assert_eq!(stats.groups.get("mail").map(|list| list.groups.clone()), Some(vec!["a".to_owned()]));
    let reserved = stats.deliveries.get("mail").and_then(|counts| counts.groups.get("a")).map(|a| a.reserved);
    assert_eq!(reserved, Some(1), "{stats:?}");
    assert!(stats.topics.keys().all(|topic| !topic.contains('/')), "{:?}", stats.topics.keys());

    let deleted = client.delete(pb::DeleteRequest { id: "for-a".into(), ..Default::default() }).await.expect("delete");
    assert_eq!(deleted.into_inner().group, None);
    let details = client.get_job(pb::GetJobRequest { id: "for-a".into(), ..Default::default() }).await.expect("get");
    let states: Vec<i32> = details.into_inner().deliveries.iter().map(|delivery| delivery.state).collect();
    assert_eq!(states, [pb::JobState::Deleted as i32], "a delete without a group cancels every delivery");
    server.stop().await;
}
