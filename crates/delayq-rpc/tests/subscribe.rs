//! Subscribe: many jobs to concurrent subscribers, flow control, and the
//! return of a vanished subscriber's jobs after their ttr.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{push, TestServer};
use delayq_rpc::pb::v1 as pb;
use delayq_rpc::pb::v1::delay_queue_service_client::DelayQueueServiceClient;
use delayq_testkit::eventually;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::Streaming;

const TOPIC: &str = "stream";

async fn subscribe(client: &mut DelayQueueServiceClient<Channel>, max_in_flight: i64) -> Streaming<pb::ReservedJob> {
    let request =
        pb::SubscribeRequest { topic: TOPIC.into(), max_in_flight: Some(max_in_flight), consumer: None, group: None };
    client.subscribe(request).await.expect("subscribe").into_inner()
}

/// Receives jobs and finishes each; returns every job received, in order.
async fn consume(
    mut client: DelayQueueServiceClient<Channel>,
    max_in_flight: i64,
    stop: CancellationToken,
) -> Vec<pb::ReservedJob> {
    let mut stream = subscribe(&mut client, max_in_flight).await;
    let mut received = Vec::new();
    let mut finishing = JoinSet::new();
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => break,
            message = stream.message() => message,
        };
        let Some(job) = message.expect("stream stays healthy") else { break };
        let mut finisher = client.clone();
        let finish = pb::FinishRequest { id: job.id.clone(), result: None, attempt: Some(job.attempt), group: None };
        finishing.spawn(async move { finisher.finish(finish).await.map(|_| ()) });
        received.push(job);
        while let Some(finished) = finishing.try_join_next() {
            finished.expect("finish task").expect("finish");
        }
    }
    while let Some(finished) = finishing.join_next().await {
        finished.expect("finish task").expect("finish");
    }
    received
}

async fn push_many(client: &mut DelayQueueServiceClient<Channel>, count: usize, ttr_ms: i64) -> Vec<String> {
    let mut ids = Vec::with_capacity(count);
    let mut remaining = count;
    while remaining > 0 {
        let size = remaining.min(1000);
        let jobs = (0..size).map(|n| pb::PushRequest { ttr_ms: Some(ttr_ms), ..push(TOPIC, &format!("job {n}")) });
        let request = pb::PushBatchRequest { jobs: jobs.collect() };
        for item in client.push_batch(request).await.expect("push batch").into_inner().items {
            match item.outcome.expect("an outcome") {
                pb::push_batch_item::Outcome::Pushed(pushed) => ids.push(pushed.id),
                pb::push_batch_item::Outcome::Error(error) => panic!("push refused: {}", error.message),
            }
        }
        remaining -= size;
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_reach_four_subscribers_exactly_once() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let started = std::time::Instant::now();
    let pushed = push_many(&mut client, 10_000, 60_000).await;
    let expected: HashSet<String> = pushed.into_iter().collect();
    assert_eq!(expected.len(), 10_000);
    let pushed_in = started.elapsed();
    let stop = CancellationToken::new();
    let mut subscribers = Vec::new();
    for _ in 0..4 {
        let client = server.client().await;
        subscribers.push(tokio::spawn(consume(client, 100, stop.clone())));
    }

    // Every job is finished once all are delivered: the store counts them.
    wait_for_finished(&client, 10_000, Duration::from_secs(90)).await;
    eprintln!("pushed 10000 jobs in {pushed_in:?}, all finished after {:?}", started.elapsed());
    stop.cancel();
    let mut seen = HashSet::new();
    let mut shares = Vec::new();
    for subscriber in subscribers {
        let received = subscriber.await.expect("subscriber task");
        shares.push(received.len());
        for job in received {
            assert_eq!(job.attempt, 1, "job {} was redelivered", job.id);
            assert!(seen.insert(job.id.clone()), "job {} was delivered twice", job.id);
        }
    }
    assert_eq!(seen, expected, "every pushed job is delivered exactly once");
    assert!(shares.iter().all(|&share| share > 0), "every subscriber gets work: {shares:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_control_and_the_jobs_of_a_vanished_subscriber() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let pushed: HashSet<String> = push_many(&mut client, 50, 1_000).await.into_iter().collect();

    // A subscriber that never acknowledges holds exactly its window.
    let mut greedy_client = server.client().await;
    let mut greedy = subscribe(&mut greedy_client, 10).await;
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(greedy.message().await.expect("message").expect("a job"));
    }
    let extra = tokio::time::timeout(Duration::from_millis(300), greedy.message()).await;
    assert!(extra.is_err(), "no 11th job while 10 are unacknowledged");
    // One Finish opens one slot.
    let first = held.remove(0);
    client
        .finish(pb::FinishRequest { id: first.id.clone(), result: None, attempt: Some(first.attempt), group: None })
        .await
        .expect("finish");
    let next = tokio::time::timeout(Duration::from_secs(2), greedy.message()).await;
    held.push(next.expect("a slot opened").expect("message").expect("a job"));
    let extra = tokio::time::timeout(Duration::from_millis(300), greedy.message()).await;
    assert!(extra.is_err(), "still at most 10 unacknowledged");

    // It goes away with 10 jobs unacknowledged; the others get them after their ttr.
    drop(greedy);
    drop(greedy_client);
    let stop = CancellationToken::new();
    let mut subscribers = Vec::new();
    for _ in 0..2 {
        subscribers.push(tokio::spawn(consume(server.client().await, 100, stop.clone())));
    }
    wait_for_finished(&client, 50, Duration::from_secs(20)).await;
    stop.cancel();
    let mut received = Vec::new();
    for subscriber in subscribers {
        received.extend(subscriber.await.expect("subscriber task"));
    }
    let held_ids: HashSet<String> = held.iter().map(|job| job.id.clone()).collect();
    let mut seen = HashSet::new();
    for job in &received {
        assert!(seen.insert(job.id.clone()), "job {} delivered twice to the others", job.id);
        let expected_attempt = if held_ids.contains(&job.id) { 2 } else { 1 };
        assert_eq!(job.attempt, expected_attempt, "job {}", job.id);
    }
    assert!(held_ids.is_subset(&seen), "the vanished subscriber's jobs came back to the others");
    seen.insert(first.id);
    assert_eq!(seen, pushed, "every job finished once, none lost");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, 5).await;
    let waiting = tokio::spawn(async move { stream.message().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop().await;
    let ended = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("stream ends").expect("task");
    let status = ended.expect_err("the stream ends with a status");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
}

/// Waits until the store counts `count` finished jobs of the topic.
async fn wait_for_finished(client: &DelayQueueServiceClient<Channel>, count: u64, limit: Duration) {
    let reached = eventually(limit, || {
        let mut client = client.clone();
        async move {
            let stats = client.stats(pb::StatsRequest {}).await.expect("stats").into_inner();
            let finished = stats.topics.get(TOPIC).map_or(0, |counts| counts.finished);
            if finished >= count {
                Ok(())
            } else {
                Err(finished)
            }
        }
    })
    .await;
    if let Err(finished) = reached {
        panic!("only {finished} of {count} finished within {limit:?}");
    }
}
