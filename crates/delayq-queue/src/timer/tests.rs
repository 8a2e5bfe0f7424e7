//! The timer's timing logic on a paused tokio clock: the timer and the
//! in-process scheduler read [`tokio_clock`], tokio jumps to the next timer
//! whenever every task waits, so a test of minutes runs in no real time and
//! checks each instant to the millisecond.
//!
//! tokio's timers fire on whole milliseconds, so an instant may come out
//! [`TICK`] late; never early.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delayq_common::{Clock, Job, JobState, Timestamp, Topic};
use delayq_testkit::{job_created_at, tokio_clock, topic};
use tokio::task::JoinHandle;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

use super::{promote_until_cancelled, LeaseGate, LEASE_RECHECK, MAX_IDLE, RETRY_AFTER_FAILURE};
use crate::error::{QueueError, QueueResult};
use crate::memory::MemoryScheduler;
use crate::scheduler::{Promotion, Scheduler};
use crate::testsuite::spawn_timer_with_clock;

/// How late tokio's millisecond timers may make an instant.
const TICK: Duration = Duration::from_millis(1);

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

/// A memory scheduler and its timer, both on `clock`.
struct Timed {
    scheduler: Arc<MemoryScheduler>,
    clock: Clock,
    topic: Topic,
    cancel: CancellationToken,
    timer: JoinHandle<()>,
}

impl Timed {
    fn start(clock: Clock) -> Timed {
        let scheduler = Arc::new(MemoryScheduler::with_clock(clock.clone()));
        let cancel = CancellationToken::new();
        let timer = spawn_timer_with_clock(Arc::clone(&scheduler), clock.clone(), cancel.clone());
        Timed { scheduler, clock, topic: topic("timed"), cancel, timer }
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Schedules job `id`, pushed now, due `delay` from now.
    async fn push(&self, id: &str, delay: Duration) -> Job {
        let now = self.now();
        let job = job_created_at(id, &self.topic, now, now.plus(delay));
        self.scheduler.schedule(&job).await.expect("a new id");
        job
    }

    /// Waits up to `wait` for one job; returns it and when it came.
    async fn pop(&self, wait: Duration) -> Option<(Job, Timestamp)> {
        let mut jobs = self.scheduler.reserve(&self.topic, 1, wait).await.expect("memory answers");
        jobs.pop().map(|job| (job, self.now()))
    }

    /// Asserts that the next job is `id`, handed out at `at`.
    async fn expect_pop(&self, id: &str, at: Timestamp) -> Job {
        let (job, popped_at) = self.pop(secs(3_600)).await.expect("a job within the hour");
        assert_eq!(job.id.as_str(), id);
        assert!(popped_at >= at, "job {id} handed out at {popped_at}, before {at}");
        assert!(
            popped_at.since(at) <= TICK,
            "job {id} handed out at {popped_at}, {:?} after {at}",
            popped_at.since(at)
        );
        job
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.timer.await.expect("the timer ends");
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_is_handed_out_at_its_due_time_and_not_before() {
    let timed = Timed::start(tokio_clock());
    let job = timed.push("due", secs(30)).await;
    let early = job.run_at.since(timed.now()) - TICK;
    assert!(timed.pop(early).await.is_none(), "nothing before the due time");
    timed.expect_pop("due", job.run_at).await;
    timed.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_sooner_job_cuts_the_timers_sleep_short() {
    let timed = Timed::start(tokio_clock());
    timed.push("later", secs(60)).await;
    // The timer now sleeps towards `later`, or its idle guard, whichever is sooner.
    sleep(secs(1)).await;
    let sooner = timed.push("sooner", secs(2)).await;
    assert!(secs(2) < MAX_IDLE, "without the wakeup the idle guard alone would deliver it late");
    timed.expect_pop("sooner", sooner.run_at).await;
    timed.stop().await;
}

#[tokio::test(start_paused = true)]
async fn after_the_clock_jumps_forward_an_idle_timer_looks_again_within_its_guard() {
    let jump = Arc::new(AtomicU64::new(0));
    let clock = {
        let (jump, tokio) = (Arc::clone(&jump), tokio_clock());
        Clock::from_fn(move || tokio.now().plus(Duration::from_millis(jump.load(Ordering::Relaxed))))
    };
    let timed = Timed::start(clock);
    let job = timed.push("in-an-hour", secs(3_600)).await;
    sleep(secs(1)).await;
    // The wall clock is set an hour ahead: the job is due now, though the timer was told otherwise.
    jump.store(3_600_000, Ordering::Relaxed);
    let (popped, at) = timed.pop(secs(3_600)).await.expect("the job");
    assert_eq!(popped.id, job.id);
    assert!(at >= job.run_at, "never early");
    assert!(at.since(job.run_at) <= MAX_IDLE, "found {:?} after it came due", at.since(job.run_at));
    timed.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unfinished_job_is_handed_out_again_when_its_ttr_runs_out() {
    let timed = Timed::start(tokio_clock());
    timed.push("ttr", Duration::ZERO).await;
    let first = timed.expect_pop("ttr", timed.now()).await;
    assert_eq!(first.attempt, 1);
    let deadline = first.updated_at.plus(first.ttr);
    let second = timed.expect_pop("ttr", deadline).await;
    assert_eq!(second.attempt, 2, "the redelivery is the next attempt");
    // The first delivery's deadline has passed: finishing it is refused.
    let stale = timed.scheduler.finish(&first.id, Some(1)).await;
    assert!(matches!(stale, Err(QueueError::StaleAttempt { .. })), "{stale:?}");
    timed.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_touch_restarts_the_ttr_from_the_touch() {
    let timed = Timed::start(tokio_clock());
    timed.push("touched", Duration::ZERO).await;
    let first = timed.expect_pop("touched", timed.now()).await;
    sleep(first.ttr / 2).await;
    let touched_at = timed.now();
    timed.scheduler.touch(&first.id, Some(1)).await.expect("reserved");
    let again = timed.pop(first.ttr - TICK).await;
    assert!(again.is_none(), "not redelivered at the first deadline: {again:?}");
    timed.expect_pop("touched", touched_at.plus(first.ttr)).await;
    timed.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_nacked_job_comes_back_after_its_delay() {
    let timed = Timed::start(tokio_clock());
    timed.push("nacked", Duration::ZERO).await;
    let popped = timed.expect_pop("nacked", timed.now()).await;
    let nacked_at = timed.now();
    let nacked = timed.scheduler.nack(&popped.id, Some(1), secs(10)).await.expect("reserved");
    assert_eq!(nacked.state, JobState::Delay);
    let back = timed.expect_pop("nacked", nacked_at.plus(secs(10))).await;
    assert_eq!(back.attempt, 2);
    timed.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_ready_job_expires_when_its_ttl_runs_out() {
    let timed = Timed::start(tokio_clock());
    let now = timed.now();
    let mut job = job_created_at("short-lived", &timed.topic, now, now.plus(secs(5)));
    job.ttl = secs(20);
    timed.scheduler.schedule(&job).await.expect("a new id");
    sleep(secs(25) - TICK).await;
    assert!(timed.scheduler.get(&job.id).await.expect("memory answers").is_some(), "held until its ttl ran out");
    sleep(TICK * 2).await;
    assert!(timed.scheduler.get(&job.id).await.expect("memory answers").is_none(), "gone once its ttl ran out");
    assert!(timed.pop(Duration::ZERO).await.is_none(), "an expired job is never handed out");
    timed.stop().await;
}

/// When each round of a loop ran, for the tests of the loop itself.
#[derive(Default)]
struct Rounds {
    at: Mutex<Vec<Timestamp>>,
    failures_left: AtomicU32,
}

impl Rounds {
    async fn round(&self, now: Timestamp) -> QueueResult<Promotion> {
        self.at.lock().expect("not poisoned").push(now);
        if self.failures_left.load(Ordering::Relaxed) > 0 {
            self.failures_left.fetch_sub(1, Ordering::Relaxed);
            return Err(QueueError::Unavailable { backend: "memory", source: "down for the test".into() });
        }
        Ok(Promotion::default())
    }

    fn times(&self) -> Vec<Timestamp> {
        self.at.lock().expect("not poisoned").clone()
    }
}

/// Runs the timer loop over `rounds` for `run_for`, with `lease` as the gate.
async fn run_loop(rounds: &Rounds, clock: &Clock, lease: impl Fn() -> bool, run_for: Duration) {
    let (wakeup, cancel) = (tokio::sync::Notify::new(), CancellationToken::new());
    let stop = async {
        sleep(run_for).await;
        cancel.cancel();
    };
    let looping =
        promote_until_cancelled(&wakeup, &cancel, LeaseGate::new("test", lease), clock, |now| rounds.round(now));
    tokio::join!(looping, stop);
}

#[tokio::test(start_paused = true)]
async fn an_idle_timer_looks_every_max_idle_and_a_failed_round_is_retried_sooner() {
    let clock = tokio_clock();
    let start = clock.now();
    let rounds = Rounds { failures_left: AtomicU32::new(2), ..Rounds::default() };
    run_loop(&rounds, &clock, || true, secs(12)).await;
    let offsets: Vec<Duration> = rounds.times().iter().map(|at| at.since(start)).collect();
    let retry = RETRY_AFTER_FAILURE;
    let expected = [Duration::ZERO, retry, retry * 2, retry * 2 + MAX_IDLE, retry * 2 + MAX_IDLE * 2];
    assert_eq!(offsets.len(), expected.len(), "rounds at {offsets:?}");
    for (offset, expected) in offsets.iter().zip(expected) {
        assert!(*offset >= expected && *offset - expected <= TICK * 2, "rounds at {offsets:?}, expected {expected:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn no_round_runs_while_the_lease_has_lapsed() {
    let clock = tokio_clock();
    let start = clock.now();
    let holds = AtomicBool::new(false);
    let rounds = Rounds::default();
    let renew = async {
        sleep(secs(3)).await;
        holds.store(true, Ordering::Relaxed);
    };
    let lease = || holds.load(Ordering::Relaxed);
    tokio::join!(run_loop(&rounds, &clock, lease, secs(4)), renew);
    let times = rounds.times();
    let first = times.first().expect("a round once the lease is renewed").since(start);
    assert!(first >= secs(3), "a round ran {first:?} in, while the lease had lapsed");
    assert!(first <= secs(3) + LEASE_RECHECK + TICK, "the first round came {first:?} in");
}
