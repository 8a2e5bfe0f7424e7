//! The unary operations against a real queue: outcomes, codes and messages.

mod common;

use common::{push, TestServer};
use delayq_rpc::pb::v1 as pb;
use delayq_rpc::RpcConfig;
use tonic::{Code, Request};

fn refusal<T: std::fmt::Debug>(outcome: Result<T, tonic::Status>) -> (Code, String) {
    let status = outcome.expect_err("the call must be refused");
    (status.code(), status.message().to_owned())
}

fn pop(topic: &str, count: i64) -> pb::PopRequest {
    pb::PopRequest { topic: topic.into(), count: Some(count), timeout_ms: Some(2_000), consumer: None, group: None }
}

fn id_request(id: &str) -> pb::FinishRequest {
    pb::FinishRequest { id: id.into(), result: None, attempt: None, group: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_pop_finish_and_history() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let pushed = client.push(push("orders", "close #1")).await.expect("push").into_inner();
    assert!(!pushed.id.is_empty());
    assert!(pushed.run_at > 0);

    let popped = client.pop(pop("orders", 5)).await.expect("pop").into_inner().jobs;
    assert_eq!(popped.len(), 1);
    let job = &popped[0];
    assert_eq!((job.id.as_str(), job.topic.as_str(), job.body.as_str()), (pushed.id.as_str(), "orders", "close #1"));
    assert_eq!((job.attempt, job.ttr_ms, job.priority), (1, 30_000, 1));

    let finish = pb::FinishRequest { id: pushed.id.clone(), result: Some("closed".into()), attempt: None, group: None };
    assert_eq!(client.finish(finish).await.expect("finish").into_inner().id, pushed.id);

    let details = client
        .get_job(pb::GetJobRequest { id: pushed.id.clone(), ..Default::default() })
        .await
        .expect("get job")
        .into_inner();
    let stored = details.job.expect("the job");
    assert_eq!(stored.state, pb::JobState::Finished as i32);
    assert_eq!(stored.result.as_deref(), Some("closed"));
    let states: Vec<i32> = details.history.iter().map(|entry| entry.state).collect();
    assert_eq!(states.last(), Some(&(pb::JobState::Finished as i32)));
    assert!(states.contains(&(pb::JobState::Reserved as i32)), "history {states:?}");

    let again = refusal(client.finish(id_request(&pushed.id)).await);
    assert_eq!(again, (Code::FailedPrecondition, format!("job {} is finished, not reserved", pushed.id)));
    let empty = client.pop(pb::PopRequest { topic: "orders".into(), ..Default::default() }).await.expect("pop");
    assert!(empty.into_inner().jobs.is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_touch_delete_and_wrong_states() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let delayed = pb::PushRequest { id: Some("later".into()), delay_ms: Some(60_000), ..push("t", "b") };
    client.push(delayed).await.expect("push delayed");
    let wrong = refusal(client.finish(id_request("later")).await);
    assert_eq!(wrong, (Code::FailedPrecondition, "job later is delay, not reserved".to_owned()));
    let touch = refusal(client.touch(pb::TouchRequest { id: "later".into(), attempt: None, group: None }).await);
    assert_eq!(touch, (Code::FailedPrecondition, "job later is delay, not reserved".to_owned()));

    client.push(pb::PushRequest { id: Some("now".into()), ..push("t", "b") }).await.expect("push");
    let popped = client.pop(pop("t", 1)).await.expect("pop").into_inner().jobs;
    assert_eq!(popped[0].id, "now");
    client.touch(pb::TouchRequest { id: "now".into(), attempt: None, group: None }).await.expect("touch");
    let nacked = client
        .nack(pb::NackRequest { id: "now".into(), delay_ms: Some(0), attempt: None, group: None })
        .await
        .expect("nack");
    assert_eq!(nacked.into_inner().state, pb::JobState::Ready as i32);
    let again = client.pop(pop("t", 1)).await.expect("pop").into_inner().jobs;
    assert_eq!((again[0].id.as_str(), again[0].attempt), ("now", 2));
    let negative = refusal(
        client.nack(pb::NackRequest { id: "now".into(), delay_ms: Some(-1), attempt: None, group: None }).await,
    );
    assert_eq!(negative, (Code::InvalidArgument, "delay must be >= 0".to_owned()));

    let deleted = client.delete(pb::DeleteRequest { id: "later".into(), ..Default::default() }).await;
    assert_eq!(deleted.expect("delete").into_inner().id, "later");
    let gone = refusal(client.delete(pb::DeleteRequest { id: "later".into(), ..Default::default() }).await);
    assert_eq!(gone, (Code::FailedPrecondition, "job later is deleted".to_owned()));
    let never = refusal(client.delete(pb::DeleteRequest { id: "never".into(), ..Default::default() }).await);
    assert_eq!(never, (Code::NotFound, "no job never".to_owned()));
    let nothing = refusal(client.delete(pb::DeleteRequest::default()).await);
    assert_eq!(nothing, (Code::InvalidArgument, "jobId is required (or topic and bizKey)".to_owned()));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn biz_keys_duplicates_and_validation() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let keyed = pb::PushRequest { biz_key: Some("order-9".into()), delay_ms: Some(60_000), ..push("pay", "b") };
    let first = client.push(keyed.clone()).await.expect("push").into_inner();
    let taken = refusal(client.push(keyed.clone()).await);
    assert_eq!(taken.0, Code::AlreadyExists, "{taken:?}");
    assert!(taken.1.contains("order-9"), "{taken:?}");
    let by_key = pb::GetJobRequest { topic: "pay".into(), biz_key: "order-9".into(), ..Default::default() };
    let found = client.get_job(by_key).await.expect("get by bizKey").into_inner().job.expect("job");
    assert_eq!(found.id, first.id);

    let fixed = pb::PushRequest { id: Some("fixed".into()), delay_ms: Some(60_000), ..push("pay", "b") };
    client.push(fixed.clone()).await.expect("push fixed id");
    assert_eq!(refusal(client.push(fixed).await), (Code::AlreadyExists, "job fixed already exists".to_owned()));

    let cases = [
        (push("", "b"), "topic is required"),
        (pb::PushRequest { body: None, ..push("t", "b") }, "body is required"),
        (pb::PushRequest { delay_ms: Some(-1), ..push("t", "b") }, "delay must be >= 0"),
        (pb::PushRequest { ttr_ms: Some(50), ..push("t", "b") }, "ttr must be from 100 ms to 86400000 ms"),
        (push("t", &"x".repeat(65_537)), "body must be at most 65536 bytes"),
    ];
    for (request, message) in cases {
        assert_eq!(refusal(client.push(request).await), (Code::InvalidArgument, message.to_owned()));
    }
    let bad_count = refusal(client.pop(pop("t", 0)).await);
    assert_eq!(bad_count, (Code::InvalidArgument, "count must be from 1 to 100".to_owned()));
    let bad_timeout =
        pb::PopRequest { topic: "t".into(), count: None, timeout_ms: Some(30_001), consumer: None, group: None };
    let bad_timeout = refusal(client.pop(bad_timeout).await);
    assert_eq!(bad_timeout, (Code::InvalidArgument, "timeout must be from 0 to 30000".to_owned()));
    let unknown = refusal(client.get_job(pb::GetJobRequest { id: "nope".into(), ..Default::default() }).await);
    assert_eq!(unknown, (Code::NotFound, "no job nope".to_owned()));

    let delete = pb::DeleteRequest { topic: "pay".into(), biz_key: "order-9".into(), ..Default::default() };
    assert_eq!(client.delete(delete).await.expect("delete by bizKey").into_inner().id, first.id);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_restore_clear_and_stats() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let jobs = vec![
        pb::PushRequest { delay_ms: Some(60_000), ..push("b", "one") },
        pb::PushRequest { priority: Some(9), ..push("b", "bad") },
        pb::PushRequest { id: Some("dup".into()), delay_ms: Some(60_000), ..push("b", "two") },
        pb::PushRequest { id: Some("dup".into()), delay_ms: Some(60_000), ..push("b", "three") },
    ];
    let items = client.push_batch(pb::PushBatchRequest { jobs }).await.expect("batch").into_inner().items;
    let outcomes: Vec<Result<String, (i32, String)>> = items
        .into_iter()
        .map(|item| match item.outcome.expect("an outcome") {
            pb::push_batch_item::Outcome::Pushed(pushed) => Ok(pushed.id),
            pb::push_batch_item::Outcome::Error(error) => Err((error.code, error.message)),
        })
        .collect();
    assert!(outcomes[0].is_ok());
    assert_eq!(outcomes[1], Err((Code::InvalidArgument as i32, "priority must be from 0 to 4".to_owned())));
    assert_eq!(outcomes[2], Ok("dup".to_owned()));
    assert_eq!(outcomes[3], Err((Code::AlreadyExists as i32, "job dup already exists".to_owned())));
    let too_many = pb::PushBatchRequest { jobs: vec![push("b", "x"); 1001] };
    let refused = refusal(client.push_batch(too_many).await);
    assert_eq!(refused, (Code::InvalidArgument, "jobs must have at most 1000 entries".to_owned()));

    let restored = client.restore(pb::RestoreRequest::default()).await.expect("restore").into_inner();
    assert_eq!(restored.restored, 2);
    let one = client.restore_job(pb::RestoreJobRequest { id: "dup".into() }).await.expect("restore job");
    assert_eq!(one.into_inner().id, "dup");
    let stats = client.stats(pb::StatsRequest {}).await.expect("stats").into_inner();
    assert_eq!(stats.topics.get("b").map(|counts| counts.delay), Some(2));
    assert_eq!((stats.scheduler.as_str(), stats.store.as_str()), ("memory", "sqlite"));

    let cleared = client.clear_all(pb::ClearAllRequest {}).await.expect("clear all").into_inner();
    assert_eq!(cleared.cleared, 2);
    let finished = refusal(client.restore_job(pb::RestoreJobRequest { id: "dup".into() }).await);
    assert_eq!(finished, (Code::FailedPrecondition, "job dup is deleted".to_owned()));
    server.stop().await;
}

fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    let value = format!("Bearer {token}").parse().expect("ascii metadata");
    request.metadata_mut().insert("authorization", value);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_guard_every_call_and_admin_calls() {
    let config =
        RpcConfig { user_tokens: vec!["user-1".into()], admin_tokens: vec!["root-1".into()], ..RpcConfig::default() };
    let server = TestServer::start_with(config).await;
    let mut client = server.client().await;
    let missing = refusal(client.push(push("t", "b")).await);
    assert_eq!(missing, (Code::Unauthenticated, "authorization is required: Bearer <token>".to_owned()));
    let wrong = refusal(client.stats(with_token(pb::StatsRequest {}, "guess")).await);
    assert_eq!(wrong, (Code::Unauthenticated, "token is not valid".to_owned()));
    client.push(with_token(push("t", "b"), "user-1")).await.expect("user push");
    let forbidden = refusal(client.clear_all(with_token(pb::ClearAllRequest {}, "user-1")).await);
    assert_eq!(forbidden, (Code::PermissionDenied, "admin token is required".to_owned()));
    let cleared = client.clear_all(with_token(pb::ClearAllRequest {}, "root-1")).await.expect("admin clear");
    assert_eq!(cleared.into_inner().cleared, 1);
    let subscribe = refusal(
        client
            .subscribe(pb::SubscribeRequest { topic: "t".into(), max_in_flight: None, consumer: None, group: None })
            .await,
    );
    assert_eq!(subscribe.0, Code::Unauthenticated);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_a_delayed_job_now_and_retry_a_dead_one() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let later = pb::PushRequest { delay_ms: Some(3_600_000), ..push("ops", "later") };
    let later = client.push(later).await.expect("push").into_inner();
    let ran = client.run_job(pb::JobRequest { id: later.id.clone() }).await.expect("run").into_inner();
    assert!(ran.run_at < later.run_at, "due now");
    assert_eq!(client.pop(pop("ops", 1)).await.expect("pop").into_inner().jobs.len(), 1);

    let once = pb::PushRequest { max_retries: Some(0), ..push("ops", "once") };
    let once = client.push(once).await.expect("push").into_inner();
    assert_eq!(client.pop(pop("ops", 1)).await.expect("pop").into_inner().jobs.len(), 1);
    let nack = pb::NackRequest { id: once.id.clone(), delay_ms: None, attempt: None, group: None };
    client.nack(nack).await.expect("nack: out of retries, dead");
    let retry = pb::JobRequest { id: once.id.clone() };
    client.retry_job(retry.clone()).await.expect("retry");
    let again = client.pop(pop("ops", 1)).await.expect("pop").into_inner().jobs;
    assert_eq!((again[0].id.as_str(), again[0].attempt), (once.id.as_str(), 1));

    let refused = refusal(client.retry_job(retry).await);
    assert_eq!(refused, (Code::FailedPrecondition, format!("job {} is reserved", once.id)));
    let again = pb::NackRequest { id: once.id.clone(), delay_ms: None, attempt: None, group: None };
    client.nack(again).await.expect("nack: dead again");
    let topic = || pb::TopicRequest { topic: "ops".into() };
    assert_eq!(client.retry_dead(topic()).await.expect("retry dead").into_inner().count, 1);
    assert_eq!(client.pop(pop("ops", 1)).await.expect("pop").into_inner().jobs.len(), 1);
    let last = pb::NackRequest { id: once.id.clone(), delay_ms: None, attempt: None, group: None };
    client.nack(last).await.expect("nack: dead once more");
    assert_eq!(client.delete_dead(topic()).await.expect("delete dead").into_inner().count, 1);
    let gone = refusal(client.get_job(pb::GetJobRequest { id: once.id.clone(), ..Default::default() }).await);
    assert_eq!(gone.0, Code::NotFound);
    let unknown = refusal(client.run_job(pb::JobRequest { id: "ghost".into() }).await);
    assert_eq!(unknown.0, Code::NotFound);

    let paused = client.pause_topic(pb::TopicRequest { topic: "ops".into() }).await.expect("pause").into_inner();
    assert!(paused.paused);
    client.push(push("ops", "held")).await.expect("push");
    assert!(client.pop(pop("ops", 1)).await.expect("pop").into_inner().jobs.is_empty(), "paused");
    client.resume_topic(pb::TopicRequest { topic: "ops".into() }).await.expect("resume");
    assert_eq!(client.pop(pop("ops", 1)).await.expect("pop").into_inner().jobs.len(), 1, "resumed");
    server.stop().await;
}
