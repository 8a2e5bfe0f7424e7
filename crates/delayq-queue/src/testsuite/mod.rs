//! The scheduler conformance suite: the checks every [`Scheduler`] backend
//! passes, written once and run unchanged against each of them.
//!
//! A backend runs the suite with [`scheduler_conformance!`](crate::scheduler_conformance),
//! giving an async expression that yields `Some(scheduler)`, or `None` when the
//! backend's service is not configured (the tests are then skipped, as
//! [`delayq_testkit::skip`] says).
//!
//! The checks are written for a backend shared by many tests running at the
//! same time (one Redis for every test binary, say):
//! - each check uses topics and job ids of its own (a prefix made of the
//!   check's name, the process id, the start time and a counter);
//! - no check asserts anything about jobs it did not create, and none moves
//!   time: promotion is driven with the real clock
//!   (`promote_due(Timestamp::now(), ..)`), so a concurrent test promoting
//!   "our" jobs only does what is due anyway;
//! - timing bounds are one-sided where speed matters (never before a due time)
//!   and generous where it does not (seconds, polled, never a fixed sleep that
//!   assumes a fast machine).
//!
//! The exceptions are [`check_clear`] and [`check_topics_after_clear`]:
//! `clear()` wipes every job of the backend, other tests' included. They are
//! therefore left out of the default expansion and only run with
//! `scheduler_conformance!(exclusive: factory)`,
//! which a backend should use only when the factory hands each test its own
//! private state (the memory backend), never on a shared server.

mod delivery;
mod lifecycle;
mod records;

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Clock, Job, JobId, JobState, Timestamp, Topic};
// What `scheduler_conformance!` expands to, reached through this crate so that
// a crate running the suite needs no dependency of its own on the testkit.
#[doc(hidden)]
pub use delayq_testkit::conformance_tests;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use self::delivery::{
    check_concurrent_consumers_get_each_job_once, check_due_order, check_long_poll_times_out,
    check_long_poll_waiters_get_distinct_jobs, check_long_poll_wakes_on_due_job, check_not_ready_before_run_at,
    check_priority_order, check_promote_batches, check_reserve_count, check_wakeup_on_sooner_job,
};
pub use self::lifecycle::{
    check_concurrent_finishes, check_dead_after_nack, check_dead_after_ttr_retries, check_delete_in_each_state,
    check_finish, check_nack_with_delay, check_touch_extends_ttr, check_ttl_expiry, check_ttr_redelivery,
};
pub use self::records::{
    check_clear, check_concurrent_gets, check_intact_while_data_kept, check_replace, check_restore_batch,
    check_restore_is_idempotent, check_schedule_and_get, check_schedule_conflict, check_stats,
    check_topics_after_clear,
};
use crate::error::QueueResult;
use crate::scheduler::{Promotion, Scheduler};
use crate::timer::{promote_until_cancelled, LeaseGate};

/// Expands to one `#[tokio::test]` per conformance check, each running it
/// against a scheduler from `factory` ([`delayq_testkit::conformance_tests!`]).
///
/// `factory` is an async expression of type `Option<Arc<dyn Scheduler>>`,
/// evaluated once per test; `None` means the backend is not configured and the
/// test is skipped ([`delayq_testkit::skip`]). The calling crate needs `tokio`
/// (with `macros` and `rt-multi-thread`) among its dev-dependencies.
///
/// - `scheduler_conformance!(factory)`: every check that is safe on a backend
///   shared with other tests running at the same time.
/// - `scheduler_conformance!(exclusive: factory)`: the checks that disturb
///   every other user of the backend (`check_clear`); only for a factory that
///   gives each test private state.
///
/// ```ignore
/// delayq_queue::scheduler_conformance!(async {
///     Some(Arc::new(MemoryScheduler::new()) as Arc<dyn Scheduler>)
/// });
/// ```
#[macro_export]
macro_rules! scheduler_conformance {
    (exclusive: $factory:expr) => {
        $crate::testsuite::conformance_tests! {
            suite: $crate::testsuite,
            backend: scheduler = $factory,
            worker_threads: 2,
            checks: [check_clear, check_topics_after_clear],
        }
    };
    ($factory:expr) => {
        $crate::testsuite::conformance_tests! {
            suite: $crate::testsuite,
            backend: scheduler = $factory,
            worker_threads: 2,
            checks: [
                check_schedule_and_get,
                check_schedule_conflict,
                check_concurrent_gets,
                check_due_order,
                check_not_ready_before_run_at,
                check_priority_order,
                check_reserve_count,
                check_promote_batches,
                check_wakeup_on_sooner_job,
                check_long_poll_wakes_on_due_job,
                check_long_poll_times_out,
                check_long_poll_waiters_get_distinct_jobs,
                check_concurrent_consumers_get_each_job_once,
                check_ttr_redelivery,
                check_nack_with_delay,
                check_dead_after_ttr_retries,
                check_dead_after_nack,
                check_ttl_expiry,
                check_touch_extends_ttr,
                check_finish,
                check_concurrent_finishes,
                check_delete_in_each_state,
                check_stats,
                check_restore_is_idempotent,
                check_restore_batch,
                check_intact_while_data_kept,
                check_replace,
            ],
        }
    };
}

/// How long any wait-loop of the suite waits for something that should take
/// well under a second, before it fails.
const WAIT_LIMIT: Duration = Duration::from_secs(10);
/// The pause between two looks of a wait-loop.
const POLL: Duration = Duration::from_millis(5);
/// The most jobs one promotion of the suite moves.
const PROMOTE_BATCH: usize = 1000;

/// Topic and id names no other check or concurrent test run uses.
struct Names {
    prefix: String,
}

impl Names {
    fn new(check: &str) -> Names {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{check}-{}-{}-{counter}", std::process::id(), Timestamp::now().as_millis());
        Names { prefix }
    }

    fn topic(&self, name: &str) -> Topic {
        Topic::parse(format!("cq.{}.{name}", self.prefix)).unwrap_or_else(|error| panic!("topic {name}: {error}"))
    }

    fn id(&self, name: &str) -> JobId {
        JobId::parse(format!("{}.{name}", self.prefix)).unwrap_or_else(|error| panic!("id {name}: {error}"))
    }

    /// A job with the defaults of a plain push ([`delayq_testkit::job`]).
    fn job(&self, name: &str, topic: &Topic, run_at: Timestamp) -> Job {
        delayq_testkit::job(self.id(name).as_str(), topic, run_at)
    }
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// The instant `millis` from now.
fn in_ms(millis: u64) -> Timestamp {
    Timestamp::now().plus(ms(millis))
}

/// The instant `millis` ago.
fn ago_ms(millis: u64) -> Timestamp {
    Timestamp::from_millis(Timestamp::now().as_millis().saturating_sub(millis))
}

/// Unwraps a result the check expects to be `Ok`.
fn ok<T>(what: &str, outcome: QueueResult<T>) -> T {
    outcome.unwrap_or_else(|error| panic!("{what}: {error:?}"))
}

fn ids(jobs: &[Job]) -> Vec<JobId> {
    jobs.iter().map(|job| job.id.clone()).collect()
}

fn state_of(job: &Option<Job>) -> Option<JobState> {
    job.as_ref().map(|job| job.state)
}

fn assert_not_found<T: Debug>(what: &str, outcome: QueueResult<T>) {
    assert!(matches!(outcome, Err(crate::QueueError::NotFound(_))), "{what}: expected NotFound, got {outcome:?}");
}

fn assert_wrong_state<T: Debug>(what: &str, outcome: QueueResult<T>, state: JobState) {
    match outcome {
        Err(crate::QueueError::WrongState { state: actual, .. }) => {
            assert_eq!(actual, state, "{what}: WrongState names the current state");
        }
        other => panic!("{what}: expected WrongState({state}), got {other:?}"),
    }
}

/// Promotes everything due now (several batches when needed).
async fn promote(scheduler: &dyn Scheduler) -> Promotion {
    let mut all = Promotion::default();
    loop {
        let round = ok("promote_due", scheduler.promote_due(Timestamp::now(), PROMOTE_BATCH).await);
        all.changed.extend(round.changed);
        all.next_due = round.next_due;
        if !round.more {
            return all;
        }
    }
}

/// Promotes until the wall clock has passed `instant`, then once more.
async fn promote_past(scheduler: &dyn Scheduler, instant: Timestamp) {
    while Timestamp::now() <= instant {
        promote(scheduler).await;
        tokio::time::sleep(POLL).await;
    }
    promote(scheduler).await;
}

/// What a wait-loop saw last.
struct Observed {
    /// The job as `get` returned it.
    job: Option<Job>,
    /// The wall clock just after that `get`.
    seen: Timestamp,
    /// The changes to this job reported by the promotions this loop ran
    /// (on a shared backend another test's promotion may report them instead).
    changes: Vec<Job>,
}

/// Promotes and looks at job `id` until `condition` holds; fails after [`WAIT_LIMIT`].
async fn wait_for(
    scheduler: &dyn Scheduler,
    id: &JobId,
    what: &str,
    condition: impl Fn(Option<&Job>) -> bool,
) -> Observed {
    let give_up = tokio::time::Instant::now() + WAIT_LIMIT;
    let mut changes = Vec::new();
    loop {
        let promotion = promote(scheduler).await;
        changes.extend(promotion.changed.into_iter().filter(|job| &job.id == id));
        let job = ok("get", scheduler.get(id).await);
        let seen = Timestamp::now();
        if condition(job.as_ref()) {
            return Observed { job, seen, changes };
        }
        assert!(tokio::time::Instant::now() < give_up, "job {id}: timed out waiting until {what}; last seen {job:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// Promotes and reserves (without waiting) until `count` jobs of `topic` came;
/// returns each with the wall clock just after the reserve that returned it.
async fn reserve_until(scheduler: &dyn Scheduler, topic: &Topic, count: usize) -> Vec<(Job, Timestamp)> {
    let give_up = tokio::time::Instant::now() + WAIT_LIMIT;
    let mut received = Vec::new();
    while received.len() < count {
        promote(scheduler).await;
        let jobs = ok("reserve", scheduler.reserve(topic, count - received.len(), Duration::ZERO).await);
        let seen = Timestamp::now();
        received.extend(jobs.into_iter().map(|job| (job, seen)));
        assert!(
            tokio::time::Instant::now() < give_up,
            "topic {topic}: timed out waiting for {count} jobs, got {received:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    received
}

/// A background task promoting due jobs every few milliseconds, for checks
/// where a consumer long-polls; stops when dropped.
struct Promoter(JoinHandle<()>);

impl Promoter {
    fn spawn(scheduler: &Arc<dyn Scheduler>) -> Promoter {
        let scheduler = Arc::clone(scheduler);
        Promoter(tokio::spawn(async move {
            loop {
                promote(&*scheduler).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }))
    }
}

impl Drop for Promoter {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Spawns a timer over `scheduler` alone until `cancel` fires: the loop of
/// [`run_timer`](crate::run_timer), with nothing journaled, so that a test
/// measures how soon the backend itself delivers a due job.
pub fn spawn_timer<S>(scheduler: Arc<S>, cancel: CancellationToken) -> JoinHandle<()>
where
    S: Scheduler + ?Sized + 'static,
{
    spawn_timer_with_clock(scheduler, Clock::system(), cancel)
}

/// [`spawn_timer`] reading the time from `clock`, for a scheduler that reads
/// the same clock (a test's paused tokio clock).
pub fn spawn_timer_with_clock<S>(scheduler: Arc<S>, clock: Clock, cancel: CancellationToken) -> JoinHandle<()>
where
    S: Scheduler + ?Sized + 'static,
{
    tokio::spawn(async move {
        let wakeup = scheduler.wakeup();
        let scheduler = &scheduler;
        let lease = LeaseGate::new("timer", || true);
        promote_until_cancelled(&wakeup, &cancel, lease, &clock, |now| scheduler.promote_due(now, PROMOTE_BATCH)).await;
    })
}
