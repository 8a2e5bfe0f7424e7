//! `Subscribe`: a stream of the jobs of a topic as they become ready, with
//! flow control per stream.
//!
//! Each stream has a task that reserves jobs through [`DelayQueue::pop`] (so a
//! streamed job is reserved with its ttr and journaled like a popped one) and
//! sends them. A stream holds at most `max_in_flight` sent, unacknowledged
//! jobs; a job stops counting when a Finish, Nack or Delete for it reaches this
//! server, or when its ttr has passed (the queue then delivers it again, to
//! this stream or another). A client that goes away leaves its jobs reserved
//! until their ttr, after which the other subscribers get them.
//!
//! Open streams count against `limits.max_waiters`: past it a Subscribe is
//! refused with `UNAVAILABLE`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use delayq_common::{ConsumerName, Group, JobId, Topic};
use delayq_queue::service::MAX_POP_COUNT;
use delayq_queue::DelayQueue;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{debug, instrument};

use crate::convert::reserved_job;
use crate::pb::v1 as pb;
use crate::status::queue_status;

/// The most unacknowledged jobs one stream may ask for.
pub(crate) const MAX_IN_FLIGHT: usize = 1000;
/// How long one reserve waits for a ready job before the loop looks around again.
const RESERVE_WAIT: Duration = Duration::from_secs(5);

type Sender = mpsc::Sender<Result<pb::ReservedJob, Status>>;

/// The sent, unacknowledged jobs of one stream.
struct Flow {
    stream: u64,
    /// Job id → when its ttr runs out, as far as this stream knows.
    in_flight: Mutex<HashMap<JobId, Instant>>,
    /// Raised when a job stops counting.
    released: Notify,
}

impl Flow {
    fn jobs(&self) -> MutexGuard<'_, HashMap<JobId, Instant>> {
        self.in_flight.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every live stream of this server and which one holds each unacknowledged job.
pub(crate) struct Subscriptions {
    next_stream: AtomicU64,
    holders: Mutex<HashMap<JobId, Arc<Flow>>>,
    /// Ends every stream (server shutdown).
    stop: CancellationToken,
    /// One permit per stream that may be open.
    open_streams: Arc<Semaphore>,
    max_streams: usize,
}

impl Subscriptions {
    /// Keeps at most `max_streams` streams open at once.
    pub(crate) fn new(stop: CancellationToken, max_streams: usize) -> Subscriptions {
        Subscriptions {
            next_stream: AtomicU64::new(1),
            holders: Mutex::new(HashMap::new()),
            stop,
            open_streams: Arc::new(Semaphore::new(max_streams.min(Semaphore::MAX_PERMITS))),
            max_streams,
        }
    }

    fn holders(&self) -> MutexGuard<'_, HashMap<JobId, Arc<Flow>>> {
        self.holders.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a stream of `topic` (of `group`'s deliveries, when given) with at
    /// most `max_in_flight` unacknowledged jobs.
    ///
    /// # Errors
    /// `UNAVAILABLE` when `max_streams` streams are open already.
    pub(crate) fn start(
        self: &Arc<Self>,
        queue: Arc<DelayQueue>,
        topic: Topic,
        group: Option<Group>,
        consumer: Option<ConsumerName>,
        max_in_flight: usize,
    ) -> Result<ReceiverStream<Result<pb::ReservedJob, Status>>, Status> {
        let Ok(permit) = Arc::clone(&self.open_streams).try_acquire_owned() else {
            return Err(Status::unavailable(format!(
                "too many waiters: at most {} (limits.max_waiters) Subscribe streams may be open",
                self.max_streams
            )));
        };
        let (sender, receiver) = mpsc::channel(max_in_flight.max(1));
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let flow = Arc::new(Flow { stream, in_flight: Mutex::new(HashMap::new()), released: Notify::new() });
        let subscription = Subscription {
            subscriptions: Arc::clone(self),
            flow,
            queue,
            topic,
            group,
            consumer,
            max_in_flight,
            sender,
            _open: permit,
        };
        tokio::spawn(subscription.run());
        Ok(ReceiverStream::new(receiver))
    }

    /// Stops counting a job against the stream that holds it (finished, nacked or deleted).
    pub(crate) fn released(&self, id: &JobId) {
        let holder = self.holders().remove(id);
        if let Some(flow) = holder {
            flow.jobs().remove(id);
            flow.released.notify_one();
        }
    }

    /// Moves the deadline of a touched job to `ttr` from now.
    pub(crate) fn touched(&self, id: &JobId, ttr: Duration) {
        let holders = self.holders();
        if let Some(flow) = holders.get(id) {
            if let Some(deadline) = flow.jobs().get_mut(id) {
                *deadline = Instant::now() + ttr;
            }
        }
    }

    /// Records that `flow` holds `id` until `deadline`, taking it from any other stream.
    fn hold(&self, flow: &Arc<Flow>, id: JobId, deadline: Instant) {
        let mut holders = self.holders();
        if let Some(previous) = holders.insert(id.clone(), Arc::clone(flow)) {
            if previous.stream != flow.stream {
                // Its ttr passed there before this stream reserved it again.
                previous.jobs().remove(&id);
                previous.released.notify_one();
            }
        }
        flow.jobs().insert(id, deadline);
    }

    /// Drops the jobs of `flow` whose ttr has passed; returns how many still
    /// count and the earliest deadline among them.
    fn expire(&self, flow: &Flow, now: Instant) -> (usize, Option<Instant>) {
        let mut holders = self.holders();
        let mut jobs = flow.jobs();
        jobs.retain(|id, deadline| {
            let live = *deadline > now;
            if !live && holders.get(id).is_some_and(|holder| holder.stream == flow.stream) {
                holders.remove(id);
            }
            live
        });
        (jobs.len(), jobs.values().min().copied())
    }

    /// Forgets every job of an ended stream.
    fn close(&self, flow: &Flow) {
        let mut holders = self.holders();
        let mut jobs = flow.jobs();
        for (id, _) in jobs.drain() {
            if holders.get(&id).is_some_and(|holder| holder.stream == flow.stream) {
                holders.remove(&id);
            }
        }
    }
}

/// One stream and its task.
struct Subscription {
    subscriptions: Arc<Subscriptions>,
    flow: Arc<Flow>,
    queue: Arc<DelayQueue>,
    topic: Topic,
    /// The consumer group whose deliveries it streams.
    group: Option<Group>,
    /// The name the client gave, for the registry of consumers.
    consumer: Option<ConsumerName>,
    max_in_flight: usize,
    sender: Sender,
    /// Its place among the open streams, given back when the task ends.
    _open: OwnedSemaphorePermit,
}

impl Subscription {
    #[instrument(skip_all, fields(topic = %self.topic, stream = self.flow.stream))]
    async fn run(self) {
        debug!(max_in_flight = self.max_in_flight, "subscription started");
        let outcome = self.deliver().await;
        self.subscriptions.close(&self.flow);
        if let Err(status) = outcome {
            // The client may be gone already; then there is no one to tell.
            let _ = self.sender.send(Err(status)).await;
        }
        debug!("subscription ended");
    }

    /// Sends jobs until the client leaves (`Ok`) or the stream must end with a status.
    async fn deliver(&self) -> Result<(), Status> {
        let stop = &self.subscriptions.stop;
        loop {
            let (in_flight, next_deadline) = self.subscriptions.expire(&self.flow, Instant::now());
            let free = self.max_in_flight.saturating_sub(in_flight);
            if free == 0 {
                // Full: wait for an acknowledgement or the earliest ttr.
                let deadline = next_deadline.unwrap_or_else(|| Instant::now() + RESERVE_WAIT);
                tokio::select! {
                    () = stop.cancelled() => return Err(shutting_down()),
                    () = self.sender.closed() => return Ok(()),
                    () = self.flow.released.notified() => {}
                    () = tokio::time::sleep_until(deadline) => {}
                }
                continue;
            }
            let count = free.min(MAX_POP_COUNT);
            let popped = tokio::select! {
                () = stop.cancelled() => return Err(shutting_down()),
                () = self.sender.closed() => return Ok(()),
                popped = self.queue.pop_for(
                    self.consumer.as_ref(), &self.topic, self.group.as_ref(), count, RESERVE_WAIT,
                ) => popped,
            };
            for job in popped.map_err(queue_status)? {
                let deadline = Instant::now() + job.ttr;
                self.subscriptions.hold(&self.flow, job.id.clone(), deadline);
                if self.sender.send(Ok(reserved_job(job))).await.is_err() {
                    // The client left; what it did not get comes back after its ttr.
                    return Ok(());
                }
            }
        }
    }
}

fn shutting_down() -> Status {
    Status::unavailable("server is shutting down")
}
