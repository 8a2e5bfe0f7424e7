//! Single schedules that arrive together go to Redis together.
//!
//! Every push schedules its job once the store has it, and the pushes of one
//! store commit all arrive at once. Sent alone, each would be a script call
//! with its own round trip and its own run of the script prelude. Here a call
//! joins a queue; one drain task at a time takes everything queued and sends
//! it as one batch (one script call per shard), then answers each caller, and
//! whatever queued up meanwhile goes in the next batch. A lone push waits for
//! nothing but the hop to the drain task.
//!
//! The drain runs as a task of its own, so a caller that goes away (its client
//! disconnected) never cancels the batch of the others. A caller waits at most
//! the Redis call timeout, counted from when it queued: should Redis hang, the
//! push answers 503 as promptly as a call of its own would have.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use delayq_common::Job;
use tokio::sync::oneshot;

use super::connection::{unavailable, TimedOut};
use super::engine::Engine;
use crate::error::QueueResult;

/// The most jobs one drain round sends.
const MAX_GROUP: usize = 1024;

struct Waiting {
    job: Job,
    reply: oneshot::Sender<QueueResult<()>>,
}

/// The queue of single schedules waiting for the next batch.
pub(super) struct Combiner {
    engine: Arc<Engine>,
    waiting: Mutex<Vec<Waiting>>,
    /// Whether a drain task is running (it owns the sending).
    draining: AtomicBool,
}

impl Combiner {
    pub(super) fn new(engine: Arc<Engine>) -> Combiner {
        Combiner { engine, waiting: Mutex::new(Vec::new()), draining: AtomicBool::new(false) }
    }

    /// Schedules `job` in the next batch; answers as a one-job `schedule_batch` would.
    pub(super) async fn schedule(self: &Arc<Self>, job: Job) -> QueueResult<()> {
        let (reply, answer) = oneshot::channel();
        self.lock().push(Waiting { job, reply });
        if !self.draining.swap(true, Ordering::SeqCst) {
            tokio::spawn(Arc::clone(self).drain());
        }
        // A caller waits no longer than one Redis call may take, even behind a
        // batch that is still waiting for a Redis that went away.
        match tokio::time::timeout(self.engine.timeout, answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(unavailable("the scheduling task stopped")),
            Err(_) => Err(unavailable(TimedOut(self.engine.timeout))),
        }
    }

    async fn drain(self: Arc<Self>) {
        loop {
            let group = {
                let mut waiting = self.lock();
                // The oldest go first; the rest wait for the next round.
                let first = MAX_GROUP.min(waiting.len());
                let rest = waiting.split_off(first);
                std::mem::replace(&mut *waiting, rest)
            };
            if group.is_empty() {
                self.draining.store(false, Ordering::SeqCst);
                // A call that queued after the take and saw the flag still set
                // spawned nothing: take its job unless another drain has started.
                if self.lock().is_empty() || self.draining.swap(true, Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            let (jobs, replies): (Vec<Job>, Vec<_>) =
                group.into_iter().map(|waiting| (waiting.job, waiting.reply)).unzip();
            match super::schedule_jobs(&self.engine, &jobs).await {
                Ok(outcomes) => {
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        let _gone = reply.send(outcome);
                    }
                }
                Err(error) => {
                    for reply in replies {
                        let _gone = reply.send(Err(error.unavailable_copy()));
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
