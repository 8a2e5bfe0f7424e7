//! The fan-out task: hands the due jobs of every topic with consumer groups to
//! its groups ([`DelayQueue::fan_out`]). Runs where the timer runs (the leader,
//! or a standalone node): one worker per topic with groups, each long-polling
//! its topic's ready queue, so a job is fanned out the moment it is promoted.
//! A worker starts within a second of a topic's first group and stops within
//! a second of its last.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::Topic;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::service::DelayQueue;
use crate::timer::LeaseGate;

/// The most jobs one fan-out reserves.
const BATCH: usize = 100;
/// Fan-outs of one topic under way at once.
const BATCHES_IN_FLIGHT: usize = 4;
/// How long a worker's reserve waits for a job before it looks again whether
/// it should go on.
const WAIT: Duration = Duration::from_secs(1);
/// How often the task looks for topics that gained or lost their groups.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// The pause after the queue failed to answer (a backend down).
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

/// Fans out the due jobs of the topics with groups until `cancel` fires; does
/// nothing while `holds_leadership` is false.
pub async fn run_fan_out<F>(queue: Arc<DelayQueue>, cancel: CancellationToken, holds_leadership: F)
where
    F: Fn() -> bool + Clone + Send + Sync + 'static,
{
    let mut workers: HashMap<Topic, (CancellationToken, JoinHandle<()>)> = HashMap::new();
    loop {
        let groups = queue.groups().await;
        workers.retain(|topic, (stop, worker)| {
            let keep = groups.contains_key(topic) && !worker.is_finished();
            if !keep {
                stop.cancel();
            }
            keep
        });
        for topic in groups.keys() {
            if !workers.contains_key(topic) {
                let stop = cancel.child_token();
                let worker = tokio::spawn(fan_out_topic(
                    Arc::clone(&queue),
                    topic.clone(),
                    stop.clone(),
                    holds_leadership.clone(),
                ));
                workers.insert(topic.clone(), (stop, worker));
            }
        }
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
    for (_, (stop, worker)) in workers {
        stop.cancel();
        let _ = worker.await;
    }
}

/// Fans out the due jobs of `topic` until `stop` fires: reserves a batch as
/// soon as one is due and hands it to a task of its own, so that the next
/// batch does not wait for the store writes of the last (up to
/// [`BATCHES_IN_FLIGHT`] at once).
async fn fan_out_topic<F>(queue: Arc<DelayQueue>, topic: Topic, stop: CancellationToken, holds_leadership: F)
where
    F: Fn() -> bool + Send,
{
    let mut lease = LeaseGate::new("fan-out", holds_leadership);
    let permits = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    let mut in_flight = JoinSet::new();
    loop {
        let mut failed = false;
        while let Some(settled) = in_flight.try_join_next() {
            failed |= !matches!(settled, Ok(true));
        }
        if failed {
            // The store or the scheduler is failing: its jobs come back after
            // their ttr; reserving more now would only send them after those.
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(RETRY_AFTER_FAILURE) => {}
            }
        }
        if stop.is_cancelled() || !lease.pass(&stop).await {
            break;
        }
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { break };
        let reserved = tokio::select! {
            () = stop.cancelled() => break,
            reserved = queue.reserve_to_fan_out(&topic, BATCH, WAIT) => reserved,
        };
        match reserved {
            Ok(jobs) if jobs.is_empty() => {}
            Ok(jobs) => {
                let (queue, topic) = (Arc::clone(&queue), topic.clone());
                // Not raced against `stop`: a fan-out cut short is safe, but one
                // that runs to its end spares its jobs their ttr.
                in_flight.spawn(async move {
                    let outcome = queue.fan_out(&topic, jobs).await;
                    drop(permit);
                    match outcome {
                        Ok(_) => true,
                        Err(error) => {
                            warn!(topic = %topic, error = &error as &dyn std::error::Error, "fan-out failed; its jobs come back after their ttr");
                            false
                        }
                    }
                });
            }
            Err(error) => {
                warn!(topic = %topic, error = &error as &dyn std::error::Error, "cannot reserve jobs to fan out");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(RETRY_AFTER_FAILURE) => {}
                }
            }
        }
    }
    while in_flight.join_next().await.is_some() {}
}
