//! Tests of the parts the conformance suite cannot see: wakeup latency,
//! cleanup of abandoned waits and behaviour at volume.

use std::time::Duration;

use delayq_testkit::topic;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;

/// A plain job ([`delayq_testkit::job_created_at`]) created at its due time.
fn job(id: &str, topic: &str, run_at: Timestamp) -> Job {
    delayq_testkit::job_created_at(id, &delayq_testkit::topic(topic), run_at, run_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_consumer_gets_a_due_job_within_milliseconds() {
    let scheduler = Arc::new(MemoryScheduler::new());
    let cancel = CancellationToken::new();
    let timer = crate::testsuite::spawn_timer(Arc::clone(&scheduler), cancel.clone());
    let topic = topic("precision");
    let mut lateness = Vec::new();
    for n in 0..20u64 {
        let run_at = Timestamp::now().plus(Duration::from_millis(30 + 7 * n));
        scheduler.schedule(&job(&format!("j{n}"), topic.as_str(), run_at)).await.expect("new id");
        let popped = scheduler.reserve(&topic, 1, Duration::from_secs(5)).await.expect("memory answers");
        let popped_at = Timestamp::now();
        assert_eq!(popped.len(), 1, "job {n} arrived");
        assert!(popped_at >= run_at, "never before its due time");
        lateness.push(popped_at.since(run_at));
    }
    cancel.cancel();
    timer.await.expect("timer ends");
    lateness.sort();
    let median = lateness[lateness.len() / 2];
    let worst = lateness[lateness.len() - 1];
    println!("lateness: median {median:?}, worst {worst:?}");
    assert!(median <= Duration::from_millis(20), "median lateness {median:?}");
    assert!(worst <= Duration::from_millis(500), "worst lateness {worst:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_ready_wakes_a_waiter_at_once() {
    let scheduler = Arc::new(MemoryScheduler::new());
    let waiting = {
        let scheduler = Arc::clone(&scheduler);
        tokio::spawn(async move {
            let jobs = scheduler.reserve(&topic("t"), 1, Duration::from_secs(5)).await.expect("memory answers");
            (jobs, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let pushed_at = Instant::now();
    scheduler.schedule(&job("j", "t", Timestamp::EPOCH)).await.expect("new id");
    let (jobs, woken_at) = waiting.await.expect("waiter ends");
    assert_eq!(jobs.len(), 1);
    let latency = woken_at.duration_since(pushed_at);
    println!("wakeup latency {latency:?}");
    assert!(latency < Duration::from_millis(500), "woken after {latency:?}");
}

#[tokio::test]
async fn an_abandoned_wait_leaves_nothing_behind() {
    let scheduler = MemoryScheduler::new();
    let waited =
        tokio::time::timeout(Duration::from_millis(20), scheduler.reserve(&topic("t"), 1, Duration::from_secs(5)))
            .await;
    assert!(waited.is_err(), "cancelled while waiting");
    assert_eq!(scheduler.lock().topic_count(), 0);
    let empty = scheduler.reserve(&topic("t"), 1, Duration::from_millis(10)).await.expect("memory answers");
    assert!(empty.is_empty());
    assert_eq!(scheduler.lock().topic_count(), 0);
}

#[tokio::test]
async fn a_huge_wait_does_not_overflow() {
    let scheduler = MemoryScheduler::new();
    scheduler.schedule(&job("j", "t", Timestamp::EPOCH)).await.expect("new id");
    let jobs = scheduler.reserve(&topic("t"), 1, Duration::MAX).await.expect("memory answers");
    assert_eq!(jobs.len(), 1);
    assert!(scheduler.reserve(&topic("t"), 0, Duration::MAX).await.expect("memory answers").is_empty());
}

#[tokio::test]
async fn handles_fifty_thousand_jobs() {
    const JOBS: u64 = 50_000;
    let scheduler = MemoryScheduler::new();
    // Far enough ahead that every job starts delayed; promotion is driven by `far`.
    let base = Timestamp::now().plus(Duration::from_secs(60));
    let started = Instant::now();
    let jobs: Vec<Job> = (0..JOBS)
        .map(|n| {
            // Due times interleaved across topics and out of insertion order.
            let due = base.plus(Duration::from_millis((n * 7_919) % 10_000));
            job(&format!("j{n}"), &format!("t{}", n % 10), due)
        })
        .collect();
    for outcome in scheduler.schedule_batch(&jobs).await.expect("memory answers") {
        outcome.expect("new id");
    }
    let far = base.plus(Duration::from_secs(10));
    let mut promoted = 0;
    loop {
        let promotion = scheduler.promote_due(far, 1000).await.expect("memory answers");
        promoted += promotion.changed.len() as u64;
        if !promotion.more {
            assert_eq!(promotion.next_due, None);
            break;
        }
    }
    assert_eq!(promoted, JOBS);
    let mut reserved = 0;
    for n in 0..10 {
        let topic = topic(&format!("t{n}"));
        let mut last_run_at = Timestamp::EPOCH;
        loop {
            let jobs = scheduler.reserve(&topic, 100, Duration::ZERO).await.expect("memory answers");
            if jobs.is_empty() {
                break;
            }
            for job in &jobs {
                assert!(job.run_at >= last_run_at, "ready queue keeps due order");
                last_run_at = job.run_at;
            }
            reserved += jobs.len() as u64;
        }
    }
    assert_eq!(reserved, JOBS);
    let stats = scheduler.stats().await.expect("memory answers");
    assert_eq!(stats.iter().map(|topic| topic.reserved).sum::<u64>(), JOBS);
    assert_eq!(scheduler.clear().await.expect("memory answers"), JOBS);
    println!("{JOBS} jobs scheduled, promoted and reserved in {:?}", started.elapsed());
}
