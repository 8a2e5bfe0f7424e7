//! Signals between nodes: the timer's wakeup and the per-topic ready hints
//! that long-polling consumers wait on.
//!
//! Scripts publish on two channels (`PUBLISH` works cluster-wide):
//! - `<prefix>:wake` `"<origin> <due ms> <shard>"` when an instant became the
//!   earliest of its shard; a node lowers what it knows of that shard's
//!   earliest instant, and wakes its timer when that is sooner than the
//!   `next_due` its timer last saw.
//! - `<prefix>:ready` `"<origin> <shard> <topic>"` when a topic's ready queue
//!   in a shard went from empty to not empty; a node marks the shard as a hint
//!   for the topic and wakes one local waiter.
//!
//! The calling node applies the signals a script returns at once and ignores
//! its own echo (`origin`). One subscriber task per scheduler listens,
//! pings to detect a dead link, and reconnects; after every (re)connect all
//! hints are raised and the timer is woken, since messages may have been lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use delayq_common::Timestamp;
use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::Msg;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tracing::{debug, warn};

/// How long a scan that found a topic empty everywhere stays trusted: within
/// it, ready hints alone tell where new jobs are.
const SCAN_TRUST: Duration = Duration::from_secs(1);
/// Topic entries nobody used for this long are forgotten (a later reserve rescans).
const TOPIC_IDLE: Duration = Duration::from_secs(60);
/// How often a timer round looks at every shard, not only those known to be due.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How often an idle subscription is pinged.
const PING_EVERY: Duration = Duration::from_secs(2);
/// The longest pause between reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What one scheduler instance knows from scripts and the subscription.
pub(super) struct Signals {
    /// This instance's name in published messages.
    pub(super) origin: String,
    shards: usize,
    /// Raised when something may be due before `timer_next_due`.
    pub(super) timer: Arc<Notify>,
    /// The earliest due instant the timer knows of (epoch ms; `u64::MAX`: none).
    timer_next_due: AtomicU64,
    topics: Mutex<HashMap<String, Arc<TopicSignal>>>,
    /// Per shard, a lower bound of its earliest instant (epoch ms; 0: unknown,
    /// `u64::MAX`: nothing), so timer rounds only call the shards that are due.
    shard_due: Box<[AtomicU64]>,
    /// When a timer round last called every shard.
    last_sweep: Mutex<Option<Instant>>,
    /// Bumped on every connect and disconnect of the subscription.
    epoch: AtomicU64,
    subscribed: AtomicBool,
}

/// What a node knows about where a topic's ready jobs are.
pub(super) struct TopicSignal {
    /// Raised once per hint; consumers waiting on the topic wait on it.
    pub(super) notify: Notify,
    /// Shards that may hold ready jobs of the topic.
    hints: Box<[AtomicBool]>,
    /// How many pops of this node are looking at shards whose hints they took.
    holders: Mutex<usize>,
    /// Raised whenever such a look ends; it has hinted again every shard it
    /// left with ready jobs.
    pub(super) looked: Notify,
    /// When a full scan last ran, and under which subscription epoch.
    scanned: Mutex<Option<(Instant, u64)>>,
    last_used: Mutex<Instant>,
}

impl Signals {
    /// Creates the signals of a scheduler over `shards` shards.
    pub(super) fn new(origin: String, shards: usize) -> Signals {
        Signals {
            origin,
            shards,
            timer: Arc::new(Notify::new()),
            timer_next_due: AtomicU64::new(u64::MAX),
            topics: Mutex::new(HashMap::new()),
            shard_due: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            last_sweep: Mutex::new(None),
            epoch: AtomicU64::new(0),
            subscribed: AtomicBool::new(false),
        }
    }

    /// Returns the signal of `topic`, creating it (and forgetting idle ones) if needed.
    pub(super) fn topic(&self, topic: &str) -> Arc<TopicSignal> {
        let mut topics = self.lock_topics();
        if let Some(signal) = topics.get(topic) {
            *lock(&signal.last_used) = Instant::now();
            return Arc::clone(signal);
        }
        topics.retain(|_, signal| Arc::strong_count(signal) > 1 || lock(&signal.last_used).elapsed() < TOPIC_IDLE);
        let hints = (0..self.shards).map(|_| AtomicBool::new(false)).collect();
        let signal = Arc::new(TopicSignal {
            notify: Notify::new(),
            hints,
            holders: Mutex::new(0),
            looked: Notify::new(),
            scanned: Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
        });
        topics.insert(topic.to_owned(), Arc::clone(&signal));
        signal
    }

    /// Notes that `topic` has new ready jobs in `shard`.
    pub(super) fn on_ready(&self, shard: usize, topic: &str) {
        let signal = self.lock_topics().get(topic).cloned();
        if let Some(signal) = signal {
            signal.hint(shard);
            signal.notify.notify_one();
        }
    }

    /// Notes an instant armed in `shard`; wakes the timer when it is sooner than what it last saw.
    pub(super) fn on_wake(&self, due_ms: u64, shard: usize) {
        if let Some(shard_due) = self.shard_due.get(shard) {
            shard_due.fetch_min(due_ms, Ordering::AcqRel);
        }
        if due_ms < self.timer_next_due.fetch_min(due_ms, Ordering::AcqRel) {
            self.timer.notify_one();
        }
    }

    /// Records the earliest due instant a timer round reported.
    pub(super) fn timer_saw(&self, next_due: Option<Timestamp>) {
        let next = next_due.map_or(u64::MAX, Timestamp::as_millis);
        self.timer_next_due.store(next, Ordering::Release);
    }

    /// Returns what is known of each shard's earliest instant, and whether this
    /// round should call every shard anyway (once per sweep period).
    pub(super) fn shard_due(&self) -> (Vec<u64>, bool) {
        let mut last_sweep = lock(&self.last_sweep);
        let sweep = last_sweep.is_none_or(|at| at.elapsed() >= SWEEP_EVERY);
        if sweep {
            *last_sweep = Some(Instant::now());
        }
        (self.shard_due.iter().map(|due| due.load(Ordering::Acquire)).collect(), sweep)
    }

    /// Stores the earliest instant a promote call read from `shard`, unless a
    /// wake lowered it since `before` was read (then the lower one stays).
    pub(super) fn settle_shard_due(&self, shard: usize, before: u64, next_due: Option<u64>) {
        let Some(shard_due) = self.shard_due.get(shard) else { return };
        let next = next_due.unwrap_or(u64::MAX);
        if shard_due.compare_exchange(before, next, Ordering::AcqRel, Ordering::Acquire).is_err() {
            shard_due.fetch_min(next, Ordering::AcqRel);
        }
    }

    /// Returns the subscription epoch while subscribed: a scan is only trusted
    /// when the subscription stayed up since it began.
    pub(super) fn live_epoch(&self) -> Option<u64> {
        let epoch = self.epoch.load(Ordering::Acquire);
        self.subscribed.load(Ordering::Acquire).then_some(epoch)
    }

    fn set_subscribed(&self, subscribed: bool) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.subscribed.store(subscribed, Ordering::Release);
        if subscribed {
            // Messages may have been lost while the link was down.
            self.shard_due.iter().for_each(|due| due.store(0, Ordering::Release));
            let topics: Vec<Arc<TopicSignal>> = self.lock_topics().values().cloned().collect();
            for signal in topics {
                (0..self.shards).for_each(|shard| signal.hint(shard));
                signal.notify.notify_waiters();
            }
            self.timer.notify_one();
        }
    }

    fn lock_topics(&self) -> MutexGuard<'_, HashMap<String, Arc<TopicSignal>>> {
        lock(&self.topics)
    }
}

impl TopicSignal {
    /// Marks `shard` as possibly holding ready jobs.
    pub(super) fn hint(&self, shard: usize) {
        if let Some(flag) = self.hints.get(shard) {
            flag.store(true, Ordering::Release);
        }
    }

    /// Takes every hinted shard, in rotation order from `start`. When it took
    /// any, the returned hold counts the look among the holders
    /// ([`TopicSignal::held_elsewhere`]) until it is dropped.
    pub(super) fn take_hints(&self, start: usize) -> (Vec<usize>, Option<Hold<'_>>) {
        // Taken and counted under one lock: a pop that finds no hint then sees the holder.
        let mut holders = lock(&self.holders);
        let shards = self.hints.len();
        let taken: Vec<usize> = (0..shards)
            .map(|step| (start + step) % shards)
            .filter(|&shard| self.hints.get(shard).is_some_and(|flag| flag.swap(false, Ordering::AcqRel)))
            .collect();
        if taken.is_empty() {
            return (taken, None);
        }
        *holders += 1;
        (taken, Some(Hold { signal: self }))
    }

    /// Returns whether a pop of this node is looking at shards whose hints it took.
    pub(super) fn held_elsewhere(&self) -> bool {
        *lock(&self.holders) > 0
    }

    /// Returns whether any shard is hinted.
    pub(super) fn has_hints(&self) -> bool {
        self.hints.iter().any(|flag| flag.load(Ordering::Acquire))
    }

    /// Returns whether the last full scan can still be trusted under `epoch`.
    pub(super) fn scan_is_fresh(&self, epoch: Option<u64>) -> bool {
        let scanned = *lock(&self.scanned);
        matches!((scanned, epoch), (Some((at, scanned_epoch)), Some(epoch)) if scanned_epoch == epoch && at.elapsed() < SCAN_TRUST)
    }

    /// Records a full scan that began at `started` under `epoch`.
    pub(super) fn record_scan(&self, started: Instant, epoch: Option<u64>) {
        *lock(&self.scanned) = epoch.map(|epoch| (started, epoch));
    }
}

/// A look at shards whose hints it took ([`TopicSignal::take_hints`]).
pub(super) struct Hold<'a> {
    signal: &'a TopicSignal,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut holders = lock(&self.signal.holders);
        *holders = holders.saturating_sub(1);
        drop(holders);
        self.signal.looked.notify_waiters();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The sections are a few loads and stores; a panic in one leaves nothing half-done.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The channels a scheduler listens on.
pub(super) struct Channels {
    pub(super) wake: String,
    pub(super) ready: String,
}

impl Channels {
    /// Returns the channels of `prefix`.
    pub(super) fn new(prefix: &str) -> Channels {
        Channels { wake: format!("{prefix}:wake"), ready: format!("{prefix}:ready") }
    }
}

/// Listens until dropped (aborted), reconnecting through `clients` in turn;
/// `first` fires once the first subscription is up.
pub(super) async fn run_subscriber(
    clients: Vec<redis::Client>,
    channels: Channels,
    signals: Arc<Signals>,
    timeout: Duration,
    first: oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut failures = 0u32;
    for attempt in 0usize.. {
        let Some(client) = clients.get(attempt % clients.len().max(1)) else {
            warn!("no redis node to subscribe to");
            return;
        };
        match tokio::time::timeout(timeout, subscribe(client, &channels)).await {
            Ok(Ok((sink, stream))) => {
                if failures > 0 {
                    warn!(failures, "redis subscription restored");
                }
                failures = 0;
                signals.set_subscribed(true);
                if let Some(first) = first.take() {
                    let _ = first.send(());
                }
                listen(sink, stream, &channels, &signals, timeout).await;
                signals.set_subscribed(false);
                debug!("redis subscription lost");
            }
            Ok(Err(error)) => log_failure(&mut failures, &error),
            Err(_) => log_failure(&mut failures, &super::connection::TimedOut(timeout)),
        }
        if failures > 0 {
            let backoff = Duration::from_millis(20u64 << failures.min(6)).min(MAX_BACKOFF);
            tokio::time::sleep(backoff).await;
        }
    }
}

fn log_failure(failures: &mut u32, error: &dyn std::error::Error) {
    *failures += 1;
    // Logs the 1st, 2nd, 4th, 8th, ... failure in a row, not every retry.
    if failures.is_power_of_two() {
        warn!(failures = *failures, error = %error, "redis subscription failed; retrying");
    }
}

async fn subscribe(client: &redis::Client, channels: &Channels) -> redis::RedisResult<(PubSubSink, PubSubStream)> {
    let (mut sink, stream) = client.get_async_pubsub().await?.split();
    sink.subscribe(&[channels.wake.as_str(), channels.ready.as_str()]).await?;
    Ok((sink, stream))
}

/// Handles messages until the link fails (closed, or a ping unanswered).
async fn listen(
    mut sink: PubSubSink,
    mut stream: PubSubStream,
    channels: &Channels,
    signals: &Signals,
    timeout: Duration,
) {
    let mut heard = true;
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else { return };
                heard = true;
                handle(&message, channels, signals);
            }
            _ = ping.tick() => {
                if !heard {
                    let answered = tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await;
                    if !matches!(answered, Ok(Ok(_))) {
                        return;
                    }
                }
                heard = false;
            }
        }
    }
}

fn handle(message: &Msg, channels: &Channels, signals: &Signals) {
    let Ok(payload) = std::str::from_utf8(message.get_payload_bytes()) else { return };
    let mut parts = payload.splitn(3, ' ');
    if parts.next() == Some(signals.origin.as_str()) {
        return;
    }
    let channel = message.get_channel_name();
    if channel == channels.wake {
        let due = parts.next().and_then(|due| due.parse().ok());
        let shard = parts.next().and_then(|shard| shard.parse().ok());
        if let (Some(due), Some(shard)) = (due, shard) {
            signals.on_wake(due, shard);
        }
    } else if channel == channels.ready {
        let shard = parts.next().and_then(|shard| shard.parse().ok());
        if let (Some(shard), Some(topic)) = (shard, parts.next()) {
            signals.on_ready(shard, topic);
        }
    }
}
