//! The forwarder: reserves ready jobs of routed topics in batches, publishes
//! them, finishes each job its sink confirmed and gives the others back with
//! their backoff (the queue marks a job dead once it is out of retries).
//!
//! Runs only where the timer runs (leader or standalone). It is a client of
//! [`DelayQueue`] like any consumer: a job is reserved for its ttr while it is
//! published, so a forwarder that dies mid-batch loses nothing.
//!
//! A sink runs in a task of its own: if it panics (a bug in a driver), its
//! batch counts as unconfirmed and each of its jobs is published again alone,
//! so only a job that makes the sink panic keeps failing, and no job waits out
//! its ttr while the forwarder goes on.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobState};
use delayq_queue::{DelayQueue, LeaseGate, QueueError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::SinkError;
use crate::metrics as forward_metrics;
use crate::route::{Route, RouteTable};

/// How often the forwarder looks for ready jobs when it found none.
const IDLE_POLL: Duration = Duration::from_millis(50);
/// The pause after the queue failed to answer (backend down).
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);
/// Batches of one route published at the same time.
const BATCHES_PER_ROUTE: usize = 4;
/// Extra time a sink gets past its own timeout before its batch counts as unconfirmed.
const PUBLISH_GRACE: Duration = Duration::from_secs(5);

/// Forwards ready jobs of the routed topics until `cancel` fires, then lets
/// the batches in flight settle.
pub async fn run_forwarder(queue: Arc<DelayQueue>, routes: Arc<RouteTable>, cancel: CancellationToken) {
    run_forwarder_fenced(queue, routes, cancel, || true).await;
}

/// Like [`run_forwarder`], but starts no batch while `holds_leadership` is
/// false (the leader's lease lapsed); it goes on if the lease is renewed.
pub async fn run_forwarder_fenced(
    queue: Arc<DelayQueue>,
    routes: Arc<RouteTable>,
    cancel: CancellationToken,
    holds_leadership: impl Fn() -> bool + Send,
) {
    if routes.is_empty() {
        return;
    }
    let permits: Vec<Arc<Semaphore>> =
        routes.routes().iter().map(|_| Arc::new(Semaphore::new(BATCHES_PER_ROUTE))).collect();
    let mut in_flight = JoinSet::new();
    let mut lease = LeaseGate::new("forwarder", holds_leadership);
    loop {
        if cancel.is_cancelled() {
            break;
        }
        while let Some(settled) = in_flight.try_join_next() {
            log_lost_batch(settled);
        }
        if !lease.pass(&cancel).await {
            break;
        }
        let pause = match start_batches(&queue, &routes, &permits, &mut in_flight).await {
            Ok(0) => IDLE_POLL,
            Ok(_) => {
                tokio::task::yield_now().await;
                continue;
            }
            Err(error) => {
                warn!(error = %error, "forwarder cannot list ready topics");
                RETRY_AFTER_FAILURE
            }
        };
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(pause) => {}
            Some(settled) = in_flight.join_next(), if !in_flight.is_empty() => log_lost_batch(settled),
        }
    }
    while let Some(settled) = in_flight.join_next().await {
        log_lost_batch(settled);
    }
}

/// Logs a batch whose settling panicked: its jobs come back after their ttr.
fn log_lost_batch(settled: Result<(), JoinError>) {
    if let Err(error) = settled {
        warn!(error = %error, "forwarder batch did not settle; its jobs come back after their ttr");
    }
}

/// Reserves one batch of each ready routed topic whose route has room; returns how many started.
async fn start_batches(
    queue: &Arc<DelayQueue>,
    routes: &RouteTable,
    permits: &[Arc<Semaphore>],
    in_flight: &mut JoinSet<()>,
) -> Result<usize, QueueError> {
    let mut started = 0;
    let groups = queue.groups().await;
    for topic in queue.ready_topics().await? {
        if groups.contains_key(&topic) {
            // Its due jobs go to its groups; a route takes a group's deliveries (`topic/group`).
            continue;
        }
        let mut routed = routes.routes().iter().zip(permits);
        let Some((route, route_permits)) = routed.find(|(route, _)| route.takes(&topic)) else { continue };
        let route = Arc::clone(route);
        let Ok(permit) = Arc::clone(route_permits).try_acquire_owned() else { continue };
        let jobs = match queue.pop(&topic, route.batch, Duration::ZERO).await {
            Ok(jobs) if jobs.is_empty() => continue,
            Ok(jobs) => jobs,
            Err(error) => {
                warn!(topic = %topic, error = %error, "forwarder cannot reserve jobs");
                continue;
            }
        };
        started += 1;
        in_flight.spawn(deliver_batch(Arc::clone(queue), route, jobs, permit));
    }
    Ok(started)
}

/// Publishes one batch and settles every job of it.
async fn deliver_batch(queue: Arc<DelayQueue>, route: Arc<Route>, jobs: Vec<Job>, _permit: OwnedSemaphorePermit) {
    let count = jobs.len();
    let jobs: Arc<[Job]> = jobs.into();
    forward_metrics::record_in_flight(&route.label, count as f64);
    route.counters().start_flight(count as u64);
    let started = Instant::now();
    let published = publish_guarded(&route, &jobs).await;
    forward_metrics::record_latency(&route.label, started.elapsed());
    let settled = futures::future::join_all(
        jobs.iter().zip(published.outcomes).map(|(job, outcome)| settle_job(&queue, &route, job, outcome)),
    )
    .await;
    let mut tally = Tally::default();
    if published.sink_panicked {
        // The batch attempt failed, and the broker may hold any of its jobs.
        tally.failed += count as u64;
        tally.unconfirmed += count as u64;
    }
    for settlement in settled {
        tally.add(settlement);
    }
    route.counters().add(tally.published, tally.failed, tally.unconfirmed, tally.dead, tally.unfinished);
    forward_metrics::record_outcomes(&route.label, tally.published, tally.failed, tally.unconfirmed, tally.dead);
    forward_metrics::record_in_flight(&route.label, -(count as f64));
    route.counters().end_flight(count as u64);
}

/// The outcomes of a batch, one per job, and whether the sink panicked on the batch as a whole.
struct Published {
    outcomes: Vec<Result<(), SinkError>>,
    sink_panicked: bool,
}

/// Publishes the batch in a task of its own; if the sink panics, publishes
/// each job alone, each in its own task, so the panic fails only the jobs that cause it.
async fn publish_guarded(route: &Arc<Route>, jobs: &Arc<[Job]>) -> Published {
    let panic = match publish_in_task(route, Arc::clone(jobs)).await {
        Ok(outcomes) => return Published { outcomes, sink_panicked: false },
        Err(panic) => panic,
    };
    warn!(sink = %route.label, jobs = jobs.len(), error = %panic, "sink panicked, publishing the batch job by job");
    let alone = jobs.iter().map(|job| async move {
        let one: Arc<[Job]> = Arc::from([job.clone()]);
        match publish_in_task(route, one).await {
            Ok(outcomes) => outcomes.into_iter().next().unwrap_or_else(|| Err(no_outcome(route))),
            Err(panic) => {
                warn!(sink = %route.label, job_id = %job.id, error = %panic, "sink panicked on this job");
                Err(SinkError::Unconfirmed { sink: route.sink.kind(), reason: "the sink panicked".to_owned() })
            }
        }
    });
    Published { outcomes: futures::future::join_all(alone).await, sink_panicked: true }
}

/// Runs [`publish_bounded`] in a spawned task; a panic in the sink comes back as the task's error.
async fn publish_in_task(route: &Arc<Route>, jobs: Arc<[Job]>) -> Result<Vec<Result<(), SinkError>>, JoinError> {
    let route = Arc::clone(route);
    tokio::spawn(async move { publish_bounded(&route, &jobs).await }).await
}

fn no_outcome(route: &Route) -> SinkError {
    SinkError::Unconfirmed { sink: route.sink.kind(), reason: "outcomes do not match the batch".to_owned() }
}

/// Publishes with the route's timeout (plus grace) as the outer bound.
async fn publish_bounded(route: &Route, jobs: &[Job]) -> Vec<Result<(), SinkError>> {
    let sink = route.sink.kind();
    match tokio::time::timeout(route.timeout + PUBLISH_GRACE, route.sink.publish(jobs)).await {
        Ok(outcomes) if outcomes.len() == jobs.len() => outcomes,
        Ok(outcomes) => {
            warn!(sink, expected = jobs.len(), got = outcomes.len(), "sink returned a wrong number of outcomes");
            jobs.iter().map(|_| Err(no_outcome(route))).collect()
        }
        Err(_) => {
            let reason = "publish timed out".to_owned();
            jobs.iter().map(|_| Err(SinkError::Unconfirmed { sink, reason: reason.clone() })).collect()
        }
    }
}

/// What happened to one job.
enum Settlement {
    Published,
    Unfinished,
    Failed { unconfirmed: bool, dead: bool },
}

#[derive(Default)]
struct Tally {
    published: u64,
    unfinished: u64,
    failed: u64,
    unconfirmed: u64,
    dead: u64,
}

impl Tally {
    fn add(&mut self, settlement: Settlement) {
        match settlement {
            Settlement::Published => self.published += 1,
            Settlement::Unfinished => {
                self.published += 1;
                self.unfinished += 1;
            }
            Settlement::Failed { unconfirmed, dead } => {
                self.failed += 1;
                self.unconfirmed += u64::from(unconfirmed);
                self.dead += u64::from(dead);
            }
        }
    }
}

/// Finishes a confirmed job, gives a failed one back with its backoff.
async fn settle_job(queue: &DelayQueue, route: &Route, job: &Job, outcome: Result<(), SinkError>) -> Settlement {
    match outcome {
        Ok(()) => match queue.finish(&job.id, Some(job.attempt), None).await {
            Ok(_) => Settlement::Published,
            Err(error) => {
                // The broker has it; the reservation runs out and it is delivered again.
                warn!(sink = %route.label, job_id = %job.id, error = %error, "confirmed job not finished");
                Settlement::Unfinished
            }
        },
        Err(failure) => {
            let unconfirmed = failure.maybe_delivered();
            debug!(sink = %route.label, job_id = %job.id, attempt = job.attempt, error = %failure, "publish failed");
            let dead = match queue.nack(&job.id, Some(job.attempt), None).await {
                Ok(nacked) if nacked.state == JobState::Dead => {
                    warn!(sink = %route.label, job_id = %job.id, attempt = job.attempt, error = %failure,
                        "job dead: out of retries while forwarding");
                    true
                }
                Ok(_) => false,
                Err(error) => {
                    // Still reserved (or gone): its ttr brings it back.
                    warn!(sink = %route.label, job_id = %job.id, error = %error, "failed job not given back");
                    false
                }
            };
            Settlement::Failed { unconfirmed, dead }
        }
    }
}
