//! Single calls that arrive together go to Redis together.
//!
//! Every push schedules its job once the store has it, and the pushes of one
//! store commit all arrive at once; so do the finishes of one commit. Sent
//! alone, each would be a script call with its own round trip and its own run
//! of the script prelude. Here a call joins a queue; one drain task at a time
//! takes everything queued and sends it as one group (one script call per
//! shard), then answers each caller, and whatever queued up meanwhile goes in
//! the next group. A lone call waits for nothing but the hop to the drain task.
//!
//! The drain runs as a task of its own, so a caller that goes away (its client
//! disconnected) never cancels the group of the others. A caller waits at most
//! the Redis call timeout, counted from when it queued: should Redis hang, the
//! call answers 503 as promptly as a call of its own would have.
//!
//! What a group is sent as is the [`Group`] the combiner is made for: from
//! `Combiner<Schedules>` at a call site, `impl Group for Schedules` (in
//! `by_shard`) is the code that runs.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::connection::{unavailable, TimedOut};
use super::runner::ScriptRunner;
use crate::error::QueueResult;

/// The most calls one drain round sends.
const MAX_GROUP: usize = 1024;

/// One kind of call that is sent in groups: what a caller sends, what it gets
/// back, and how a group of them goes to Redis.
pub(super) trait Group: Send + Sync + 'static {
    type Request: Send + Sync + 'static;
    type Outcome: Send + 'static;

    /// Sends a group of requests in as few script calls as it can; answers one
    /// outcome per request, in order (an outer error fails them all).
    fn send<'a>(
        runner: &'a ScriptRunner,
        requests: &'a [Self::Request],
    ) -> impl Future<Output = QueueResult<Vec<QueueResult<Self::Outcome>>>> + Send + 'a;
}

struct Waiting<G: Group> {
    request: G::Request,
    reply: oneshot::Sender<QueueResult<G::Outcome>>,
}

/// The queue of calls of one kind waiting for the next group.
pub(super) struct Combiner<G: Group> {
    runner: Arc<ScriptRunner>,
    waiting: Mutex<Vec<Waiting<G>>>,
    /// Whether a drain task is running (it owns the sending).
    draining: AtomicBool,
    group: PhantomData<G>,
}

impl<G: Group> Combiner<G> {
    pub(super) fn new(runner: Arc<ScriptRunner>) -> Combiner<G> {
        Combiner { runner, waiting: Mutex::new(Vec::new()), draining: AtomicBool::new(false), group: PhantomData }
    }

    /// Sends `request` in the next group; answers as a group of one would.
    pub(super) async fn call(self: &Arc<Self>, request: G::Request) -> QueueResult<G::Outcome> {
        let (reply, answer) = oneshot::channel();
        self.lock().push(Waiting { request, reply });
        if !self.draining.swap(true, Ordering::SeqCst) {
            tokio::spawn(Arc::clone(self).drain());
        }
        // A caller waits no longer than one Redis call may take, even behind a
        // group that is still waiting for a Redis that went away.
        match tokio::time::timeout(self.runner.timeout, answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(unavailable("the task sending to Redis stopped")),
            Err(_) => Err(unavailable(TimedOut(self.runner.timeout))),
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
                // spawned nothing: take its request unless another drain has started.
                if self.lock().is_empty() || self.draining.swap(true, Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            let (requests, replies): (Vec<G::Request>, Vec<_>) =
                group.into_iter().map(|waiting| (waiting.request, waiting.reply)).unzip();
            match G::send(&self.runner, &requests).await {
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiting<G>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
