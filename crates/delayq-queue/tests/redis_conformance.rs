//! The scheduler conformance suite against standalone Redis
//! (`DELAYQ_TEST_REDIS_URL`), plus what only Redis has: several nodes on one
//! queue, outages and restarts, and the memory and throughput measurements.
//!
//! Every test gets its own key prefix, so tests share the server safely and
//! the exclusive checks (`clear`) only wipe their own keys.

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_common::{Job, JobId, JobState, Timestamp};
use delayq_queue::{QueueError, Scheduler};

mod common;

use common::{connect, job, topic, unique_prefix};
use delayq_testkit::{eventually, service, RedisProcess};
use tokio_util::sync::CancellationToken;

const URL_VARIABLE: &str = "DELAYQ_TEST_REDIS_URL";

async fn redis() -> Option<Arc<dyn Scheduler>> {
    let url = service(URL_VARIABLE)?;
    Some(Arc::new(connect(&url, &unique_prefix()).await))
}

delayq_queue::scheduler_conformance!(redis());

mod exclusive {
    use super::*;

    // Each test has a prefix of its own, so `clear` wipes nobody else's jobs.
    delayq_queue::scheduler_conformance!(exclusive: redis());
}

/// Two nodes on one prefix: a push on one wakes the other's timer and
/// its long-polling consumer, quickly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_signal_each_other() {
    let Some(url) = service(URL_VARIABLE) else { return };
    let prefix = unique_prefix();
    let timer_node = connect(&url, &prefix).await;
    let push_node = connect(&url, &prefix).await;
    let queue = topic("cross.node");

    let idle = timer_node.promote_due(Timestamp::now(), 100).await.expect("promote");
    assert_eq!(idle.next_due, None, "a fresh prefix holds nothing");
    let wakeup = timer_node.wakeup();
    let woken = wakeup.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    let pushed = Instant::now();
    let soon = job("100", &queue, Timestamp::now().plus(Duration::from_millis(200)), 10);
    push_node.schedule(&soon).await.expect("schedule");
    tokio::time::timeout(Duration::from_secs(1), woken).await.expect("the other node's timer is woken");
    println!("timer wakeup across nodes after {:?}", pushed.elapsed());

    let waiter = {
        let queue = queue.clone();
        let timer_node = Arc::new(timer_node);
        let waiting = Arc::clone(&timer_node);
        (timer_node, tokio::spawn(async move { waiting.reserve(&queue, 1, Duration::from_secs(5)).await }))
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let pushed = Instant::now();
    push_node.schedule(&job("101", &queue, Timestamp::now(), 10)).await.expect("schedule ready job");
    let reserved = waiter.1.await.expect("waiter").expect("reserve");
    let waited = pushed.elapsed();
    assert_eq!(reserved.iter().map(|job| job.id.as_str()).collect::<Vec<_>>(), ["101"]);
    assert!(waited < Duration::from_millis(500), "woken across nodes after {waited:?}");
    println!("long-poll wakeup across nodes after {waited:?}");
}

/// Single schedules that arrive together are sent together; each caller still
/// gets its own answer, and of two pushes of one id exactly one gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_single_schedules_are_each_answered() {
    let Some(url) = service(URL_VARIABLE) else { return };
    let scheduler = Arc::new(connect(&url, &unique_prefix()).await);
    let queue = topic("combined");
    let run_at = Timestamp::now().plus(Duration::from_secs(600));
    let mut calls = tokio::task::JoinSet::new();
    for index in 0..400u32 {
        // Ids 0..300, the first 100 of them twice.
        let id = (index % 300).to_string();
        let scheduler = Arc::clone(&scheduler);
        let job = job(&id, &queue, run_at, 10);
        calls.spawn(async move { (id, scheduler.schedule(&job).await) });
    }
    let mut added = std::collections::HashMap::<String, u32>::new();
    let mut conflicts = std::collections::HashMap::<String, u32>::new();
    while let Some(joined) = calls.join_next().await {
        let (id, outcome) = joined.expect("task");
        match outcome {
            Ok(()) => *added.entry(id).or_default() += 1,
            Err(QueueError::Conflict(_)) => *conflicts.entry(id).or_default() += 1,
            Err(error) => panic!("schedule of {id}: {error:?}"),
        }
    }
    assert_eq!(added.len(), 300, "every id got in");
    assert!(added.values().all(|&times| times == 1), "no id got in twice");
    assert_eq!(conflicts.len(), 100);
    assert!(conflicts.keys().all(|id| id.parse::<u32>().is_ok_and(|id| id < 100)), "{conflicts:?}");
    let stats = scheduler.stats().await.expect("stats");
    assert_eq!(stats.iter().map(|topic| topic.delay).sum::<u64>(), 300);
}

/// Many consumers popping at once without waiting: each pop gets at most its
/// count, no job goes to two pops, and together they take every ready job. A
/// pop that finds no hint while another pop holds the node's hints of where
/// the ready jobs are waits for that look before it answers none. The rounds
/// after the first come within a second of its full scan, when a pop trusts
/// the hints alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pops_share_the_ready_jobs() {
    let Some(url) = service(URL_VARIABLE) else { return };
    let scheduler = Arc::new(connect(&url, &unique_prefix()).await);
    let queue = topic("concurrent.pops");
    for round in 0..5u32 {
        let now = Timestamp::now();
        for index in 0..50u32 {
            scheduler.schedule(&job(&format!("r{round}p{index}"), &queue, now, 10)).await.expect("schedule");
        }
        eventually(Duration::from_secs(5), || async {
            scheduler.promote_due(Timestamp::now(), 1000).await.expect("promote");
            scheduler.stats().await.expect("stats").iter().map(|topic| topic.ready).sum::<u64>() == 50
        })
        .await;
        let mut pops = tokio::task::JoinSet::new();
        for index in 0..80usize {
            let (scheduler, queue) = (Arc::clone(&scheduler), queue.clone());
            let count = 1 + index % 3;
            pops.spawn(async move { (count, scheduler.reserve(&queue, count, Duration::ZERO).await) });
        }
        let mut delivered = std::collections::HashSet::new();
        while let Some(joined) = pops.join_next().await {
            let (count, popped) = joined.expect("task");
            let popped = popped.expect("reserve");
            assert!(popped.len() <= count, "a pop of {count} got {}", popped.len());
            for job in popped {
                assert_eq!(job.state, JobState::Reserved);
                assert!(delivered.insert(job.id.as_str().to_owned()), "{} went to two pops", job.id);
            }
        }
        assert_eq!(delivered.len(), 50, "round {round}: 80 pops of up to 3 each left ready jobs behind");
    }
}

/// A stale leader's timer rounds are refused once a newer term promoted, so it
/// cannot promote a job its successor already handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_leader_is_fenced() {
    let Some(url) = service(URL_VARIABLE) else { return };
    let prefix = unique_prefix();
    let old_leader = connect(&url, &prefix).await;
    let new_leader = connect(&url, &prefix).await;
    let queue = topic("fenced");
    old_leader.fence(5);
    old_leader.promote_due(Timestamp::now(), 100).await.expect("the only leader promotes");

    new_leader.fence(7);
    new_leader.promote_due(Timestamp::now(), 100).await.expect("the newer term promotes");
    let soon = Timestamp::now().plus(Duration::from_millis(300));
    new_leader.schedule(&job("200", &queue, soon, 10)).await.expect("schedule a job due soon");
    tokio::time::sleep(Duration::from_millis(400)).await;
    // A round only calls the shards it knows are due (all of them once a second):
    // within a few rounds the stale term reaches the job's shard and is refused there.
    let deadline = Instant::now() + Duration::from_secs(5);
    let refused = loop {
        match old_leader.promote_due(Timestamp::now(), 100).await {
            Ok(round) => assert!(round.changed.is_empty(), "the stale term promoted {:?}", round.changed),
            Err(error) => break error,
        }
        assert!(Instant::now() < deadline, "the stale term was never refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        matches!(&refused, QueueError::Unavailable { source, .. } if format!("{source:?}").contains("FENCED")),
        "the stale term is refused: {refused:?}"
    );
    let promoted = new_leader.promote_due(Timestamp::now(), 100).await.expect("the newer term promotes");
    assert_eq!(promoted.changed.iter().map(|job| job.id.as_str()).collect::<Vec<_>>(), ["200"]);

    // Clearing the queue keeps the fence; a node that becomes leader again in a later term promotes.
    old_leader.clear().await.expect("clear");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(old_leader.promote_due(Timestamp::now(), 100).await.is_err(), "the fence survives clear");
    old_leader.fence(9);
    old_leader.promote_due(Timestamp::now(), 100).await.expect("a later term promotes");
}

/// Returns the numeric `field` of `INFO section` of `server`.
fn info(server: &RedisProcess, section: &str, field: &str) -> f64 {
    let text = server.cli(&["info", section]);
    let prefix = format!("{field}:");
    let value = text.lines().find_map(|line| line.strip_prefix(prefix.as_str())).expect("the field");
    value.trim().parse().expect("a number")
}

fn used_memory(server: &RedisProcess) -> u64 {
    info(server, "memory", "used_memory") as u64
}

/// Returns the CPU seconds `server` used so far.
fn cpu_seconds(server: &RedisProcess) -> f64 {
    info(server, "cpu", "used_cpu_user") + info(server, "cpu", "used_cpu_sys")
}

/// Expects `call` to fail as unavailable (naming redis) within about a second.
async fn expect_unavailable<T: std::fmt::Debug>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, QueueError>>,
) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(3), call).await;
    let elapsed = started.elapsed();
    match outcome {
        Ok(Err(QueueError::Unavailable { backend: "redis", .. })) => {}
        other => panic!("{what} while redis is down: expected Unavailable, got {other:?}"),
    }
    assert!(elapsed <= Duration::from_millis(1_500), "{what} failed only after {elapsed:?}");
}

/// Redis going away turns every call into a quick `Unavailable`; once it is
/// back, calls succeed again and long-polls are woken again, without a new scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_a_redis_restart() {
    let Some(server) = RedisProcess::start().await else { return };
    let port = server.port();
    let scheduler = Arc::new(connect(&server.url(), "restart").await);
    let queue = topic("restart");
    scheduler.schedule(&job("1", &queue, Timestamp::now(), 10)).await.expect("schedule while up");
    drop(server);

    expect_unavailable("schedule", scheduler.schedule(&job("2", &queue, Timestamp::now(), 10))).await;
    expect_unavailable("get", scheduler.get(&JobId::parse("1").expect("id"))).await;
    expect_unavailable("reserve", scheduler.reserve(&queue, 1, Duration::from_millis(100))).await;
    expect_unavailable("promote_due", scheduler.promote_due(Timestamp::now(), 100)).await;
    expect_unavailable("stats", scheduler.stats()).await;
    expect_unavailable("ping", scheduler.ping()).await;

    let _server = RedisProcess::start_on(port).await.expect("restart redis-server");
    let back = Instant::now();
    let recovered = eventually(Duration::from_secs(10), || scheduler.ping()).await;
    assert!(recovered.is_ok(), "no recovery after redis came back");
    println!("calls succeed again {:?} after redis came back", back.elapsed());
    // The restarted server is empty: the job pushed before is gone (restore's job), new ones work.
    assert_eq!(scheduler.get(&JobId::parse("1").expect("id")).await.expect("get"), None);
    scheduler.schedule(&job("3", &queue, Timestamp::now(), 10)).await.expect("schedule after recovery");
    let reserved = scheduler.reserve(&queue, 5, Duration::ZERO).await.expect("reserve after recovery");
    assert_eq!(reserved.len(), 1);

    // The subscription came back too: a push from another node wakes a waiting consumer.
    let other = connect(&format!("redis://127.0.0.1:{port}"), "restart").await;
    let waiting = {
        let scheduler = Arc::clone(&scheduler);
        let queue = queue.clone();
        tokio::spawn(async move { scheduler.reserve(&queue, 1, Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pushed = Instant::now();
    other.schedule(&job("4", &queue, Timestamp::now(), 10)).await.expect("schedule from the other node");
    let reserved = waiting.await.expect("waiter").expect("reserve");
    assert_eq!(reserved.len(), 1);
    assert!(pushed.elapsed() < Duration::from_millis(500), "woken {:?} after the push", pushed.elapsed());
}

/// Memory per pending delayed job with a 100-byte body (the W3 shape: one
/// topic, default options, snowflake-like ids), on a private server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run with --ignored --nocapture"]
async fn measure_memory_per_delayed_job() {
    let Some(server) = RedisProcess::start().await else { return };
    let scheduler = connect(&server.url(), "delayq").await;
    let queue = topic("bench.w3");
    for jobs in [100_000u64, 200_000] {
        // Warm up as the workload does: scripts loaded, topic known, then empty.
        let warm_up = job("1", &queue, Timestamp::now().plus(Duration::from_secs(3_600)), 100);
        scheduler.schedule(&warm_up).await.expect("warm-up schedule");
        scheduler.clear().await.expect("clear");
        let before = used_memory(&server);
        let run_at = Timestamp::now().plus(Duration::from_secs(3_600));
        let first_id = 1_900_000_000_000_000_000u64;
        for chunk in 0..jobs / 1_000 {
            let batch: Vec<Job> =
                (0..1_000).map(|n| job(&(first_id + chunk * 1_000 + n).to_string(), &queue, run_at, 100)).collect();
            for outcome in scheduler.schedule_batch(&batch).await.expect("schedule_batch") {
                outcome.expect("scheduled");
            }
        }
        let after = used_memory(&server);
        println!("{jobs} delayed jobs: {} bytes of used_memory per job", (after - before) / jobs);
    }
}

/// Schedule throughput on a private server: batches of 1000, and 50
/// concurrent single schedules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run with --ignored --nocapture"]
async fn measure_schedule_throughput() {
    const JOBS: u64 = 100_000;
    let Some(server) = RedisProcess::start().await else { return };
    let scheduler = Arc::new(connect(&server.url(), "delayq").await);
    let queue = topic("bench.w1");
    let make = |n: u64| {
        job(
            &(1_900_000_000_000_000_000u64 + n).to_string(),
            &queue,
            Timestamp::now().plus(Duration::from_millis(20_000 + n * 7_919 % 20_001)),
            100,
        )
    };

    let jobs: Vec<Job> = (0..JOBS).map(make).collect();
    let (started, cpu) = (Instant::now(), cpu_seconds(&server));
    for batch in jobs.chunks(1_000) {
        scheduler.schedule_batch(batch).await.expect("schedule_batch");
    }
    let elapsed = started.elapsed();
    let cpu_per_job = (cpu_seconds(&server) - cpu) * 1e6 / JOBS as f64;
    println!(
        "schedule_batch(1000): {:.0} jobs/s, redis cpu {cpu_per_job:.1} us/job",
        JOBS as f64 / elapsed.as_secs_f64()
    );

    scheduler.clear().await.expect("clear");
    let jobs = Arc::new((0..JOBS).map(make).collect::<Vec<Job>>());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (started, cpu) = (Instant::now(), cpu_seconds(&server));
    let lanes: Vec<_> = (0..50)
        .map(|_| {
            let (scheduler, jobs, next) = (Arc::clone(&scheduler), Arc::clone(&jobs), Arc::clone(&next));
            tokio::spawn(async move {
                loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(job) = jobs.get(index) else { return };
                    scheduler.schedule(job).await.expect("schedule");
                }
            })
        })
        .collect();
    for lane in lanes {
        lane.await.expect("lane");
    }
    let elapsed = started.elapsed();
    let cpu_per_job = (cpu_seconds(&server) - cpu) * 1e6 / JOBS as f64;
    println!(
        "schedule, 50 in flight: {:.0} jobs/s, redis cpu {cpu_per_job:.1} us/job",
        JOBS as f64 / elapsed.as_secs_f64()
    );
    let stats = scheduler.stats().await.expect("stats");
    assert_eq!(stats.iter().map(|stats| stats.delay + stats.ready).sum::<u64>(), JOBS);
}

/// Firing lateness in the shape of workload W2 (20,000 jobs due over 5 s,
/// 50 consumers long-polling up to 100 jobs), with the loop of `run_timer` over
/// the scheduler alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run with --ignored --nocapture"]
async fn measure_lateness() {
    const JOBS: u64 = 20_000;
    let Some(server) = RedisProcess::start().await else { return };
    let scheduler = Arc::new(connect(&server.url(), "delayq").await);
    let queue = topic("bench.w2");
    let stop_timer = CancellationToken::new();
    let timer = delayq_queue::testsuite::spawn_timer(Arc::clone(&scheduler), stop_timer.clone());
    let late = Arc::new(std::sync::Mutex::new(Vec::new()));
    let consumers: Vec<_> = (0..50)
        .map(|_| {
            let (scheduler, queue, late) = (Arc::clone(&scheduler), queue.clone(), Arc::clone(&late));
            tokio::spawn(async move {
                let stop = Instant::now() + Duration::from_secs(20);
                while Instant::now() < stop {
                    let jobs = scheduler.reserve(&queue, 100, Duration::from_secs(1)).await.expect("reserve");
                    let now = Timestamp::now().as_millis() as i64;
                    // Acks go on in the background, so the next pop is not held up by them.
                    let (acker, ids) =
                        (Arc::clone(&scheduler), jobs.iter().map(|job| job.id.clone()).collect::<Vec<_>>());
                    tokio::spawn(async move {
                        for id in ids {
                            let _ = acker.finish(&id, None).await;
                        }
                    });
                    let mut late = late.lock().expect("lock");
                    late.extend(jobs.iter().map(|job| now - job.run_at.as_millis() as i64));
                    if late.len() as u64 >= JOBS {
                        return;
                    }
                }
            })
        })
        .collect();
    let start = Timestamp::now().plus(Duration::from_secs(3));
    let jobs: Vec<Job> = (0..JOBS)
        .map(|n| {
            job(&(2_000_000_000 + n).to_string(), &queue, start.plus(Duration::from_millis(n * 5_000 / JOBS)), 100)
        })
        .collect();
    for batch in jobs.chunks(1_000) {
        scheduler.schedule_batch(batch).await.expect("schedule_batch");
    }
    for consumer in consumers {
        consumer.await.expect("consumer");
    }
    stop_timer.cancel();
    timer.await.expect("timer ends");
    let mut late = late.lock().expect("lock").clone();
    late.sort_unstable();
    let rank = |p: f64| late[((p / 100.0 * late.len() as f64).ceil() as usize).saturating_sub(1)];
    println!(
        "lateness ms over {} jobs: p50 {} p90 {} p99 {} max {} early {}",
        late.len(),
        rank(50.0),
        rank(90.0),
        rank(99.0),
        rank(100.0),
        late.iter().filter(|&&ms| ms < 0).count()
    );
    assert_eq!(late.len() as u64, JOBS);
}

/// A FLUSHALL (or a restart without persistence) is reported by `check_intact`
/// exactly once, and `clear` is not mistaken for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_lost_data() {
    let Some(server) = RedisProcess::start().await else { return };
    let scheduler = connect(&server.url(), "loss").await;
    assert!(!scheduler.check_intact().await.expect("check"), "a never-marked redis counts as lost");
    assert!(scheduler.check_intact().await.expect("check"), "marked by the first check");
    let queue = topic("loss");
    scheduler.schedule(&job("1", &queue, Timestamp::now(), 10)).await.expect("schedule");
    scheduler.clear().await.expect("clear");
    assert!(scheduler.check_intact().await.expect("check"), "clear keeps the marks");

    server.cli(&["flushall"]);
    // Something arrives before the check: the shards it created carry no mark.
    scheduler.schedule(&job("2", &queue, Timestamp::now(), 10)).await.expect("schedule");
    assert!(!scheduler.check_intact().await.expect("check"), "FLUSHALL is noticed");
    assert!(scheduler.check_intact().await.expect("check"), "and reported once");

    // A restored reserved job keeps its reservation until its ttr deadline.
    let mut reserved = job("3", &queue, Timestamp::now(), 10);
    reserved.state = JobState::Reserved;
    reserved.ttr = Duration::from_secs(30);
    assert!(scheduler.restore(&reserved).await.expect("restore"));
    let held = scheduler.get(&reserved.id).await.expect("get").expect("held");
    assert_eq!(held.state, JobState::Reserved);
}

/// Ended topics leave no code, name, count or ready queue in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_topics_leave_no_metadata() {
    let Some(url) = service(URL_VARIABLE) else { return };
    common::topic_metadata::check_ended_topics_leave_no_metadata(&url).await;
}

/// A topic whose metadata was freed works normally when pushed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_pushed_again_after_freeing() {
    let Some(url) = service(URL_VARIABLE) else { return };
    common::topic_metadata::check_topic_pushed_again_after_freeing(&url).await;
}

/// Pushes racing the delete of a topic's last job keep their topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_racing_the_last_delete_keep_their_topic() {
    let Some(url) = service(URL_VARIABLE) else { return };
    common::topic_metadata::check_pushes_racing_the_last_delete(&url).await;
}
