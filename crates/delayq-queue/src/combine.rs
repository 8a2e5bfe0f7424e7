//! Single calls that arrive together go to a backend together.
//!
//! Every push schedules its job once the store has it, and the pushes of one
//! store commit all arrive at once; so do the finishes of one commit, and the
//! pops of many consumers. Sent alone, each would be a call with its own round
//! trip (on Redis, its own run of the script prelude; on a database, its own
//! statement). Here a call joins a queue; one drain task at a time takes
//! everything queued and sends it as one group, then answers each caller, and
//! whatever queued up meanwhile goes in the next group. A lone call waits for
//! nothing but the hop to the drain task.
//!
//! The drain runs as a task of its own, so a caller that goes away (its client
//! disconnected) never cancels the group of the others. A caller waits at most
//! the backend's call timeout ([`Sender::deadline`]), counted from when it
//! queued: should the backend hang, the call answers 503 as promptly as a call
//! of its own would have.
//!
//! What a group is sent as is the [`Group`] the combiner is made for: from
//! `Combiner<Schedules>` at a call site, `impl Group for Schedules` (in
//! `redis::by_shard`) is the code that runs.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::error::{QueueError, QueueResult};

/// The most calls one drain round sends.
const MAX_GROUP: usize = 1024;

/// What sends the groups: a backend, with the bound on one call to it.
pub(crate) trait Sender: Send + Sync + 'static {
    /// The longest a caller waits for its answer.
    fn deadline(&self) -> Duration;
    /// What a caller gets when the deadline passed.
    fn timed_out(&self) -> QueueError;
    /// What a caller gets when the drain task stopped without answering.
    fn stopped(&self) -> QueueError;
}

/// One kind of call that is sent in groups: what a caller sends, what it gets
/// back, and how a group of them goes to the backend.
pub(crate) trait Group: Send + Sync + 'static {
    type Sender: Sender;
    type Request: Send + Sync + 'static;
    type Outcome: Send + 'static;

    /// Sends a group of requests in as few backend calls as it can; answers
    /// one outcome per request, in order (an outer error fails them all).
    fn send<'a>(
        sender: &'a Self::Sender,
        requests: &'a [Self::Request],
    ) -> impl Future<Output = QueueResult<Vec<QueueResult<Self::Outcome>>>> + Send + 'a;
}

struct Waiting<G: Group> {
    request: G::Request,
    reply: oneshot::Sender<QueueResult<G::Outcome>>,
}

/// The queue of calls of one kind waiting for the next group.
pub(crate) struct Combiner<G: Group> {
    sender: Arc<G::Sender>,
    waiting: Mutex<Vec<Waiting<G>>>,
    /// Whether a drain task is running (it owns the sending).
    draining: AtomicBool,
    group: PhantomData<G>,
}

impl<G: Group> Combiner<G> {
    pub(crate) fn new(sender: Arc<G::Sender>) -> Combiner<G> {
        Combiner { sender, waiting: Mutex::new(Vec::new()), draining: AtomicBool::new(false), group: PhantomData }
    }

    /// Sends `request` in the next group; answers as a group of one would.
    pub(crate) async fn call(self: &Arc<Self>, request: G::Request) -> QueueResult<G::Outcome> {
        let (reply, answer) = oneshot::channel();
        self.lock().push(Waiting { request, reply });
        if !self.draining.swap(true, Ordering::SeqCst) {
            tokio::spawn(Arc::clone(self).drain());
        }
        // A caller waits no longer than one backend call may take, even behind
        // a group that is still waiting for a backend that went away.
        match tokio::time::timeout(self.sender.deadline(), answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(self.sender.stopped()),
            Err(_) => Err(self.sender.timed_out()),
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
            match G::send(&self.sender, &requests).await {
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
