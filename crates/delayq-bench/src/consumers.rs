//! The consumer side of the lateness and burst workloads: C long-polling pop slots
//! (`/pop` or gRPC `Pop`) that stamp each receipt at once and then acknowledge it.
//!
//! By default a slot finishes every job it received, one after another, before
//! it pops again (W2 of docs/benchmarks.md, as a real worker does): a slow `/finish`
//! holds its slot back and shows up as lateness. With `--finish-concurrency` the
//! acks go to a separate pool of finishers instead, so acknowledging never
//! delays the next pop; that measures delivery alone.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delayq_rpc::pb::v1::PopRequest;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::body::parse_body_fields;
use crate::client::{parse_popped, BenchClient, PoppedJob};
use crate::clock::now_ms;
use crate::error::BenchResult;
use crate::grpc::GrpcClient;

/// How long a slot backs off after a failed pop.
const POP_ERROR_BACKOFF: Duration = Duration::from_millis(20);
/// How often the start-up waits look at the slot counter.
const START_POLL: Duration = Duration::from_millis(5);
/// How long outstanding finishes may take after the consumers stopped.
const FINISH_DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Every receipt of one run (or of one consumer group's deliveries), indexed by the job's `i`.
pub(crate) struct ReceiptLog {
    due_ms: Vec<u64>,
    /// The consumer group whose deliveries this log expects; `None` without groups.
    group: Option<String>,
    /// Epoch ms of the first receipt of each job; 0 until it arrives.
    first_receipt_ms: Vec<AtomicU64>,
    receipts: AtomicU64,
    distinct: AtomicUsize,
    unknown: AtomicU64,
    due_mismatches: AtomicU64,
    group_mismatches: AtomicU64,
    pop_errors: AtomicU64,
    finished: AtomicU64,
    finish_errors: AtomicU64,
    last_finish_ms: AtomicU64,
    /// The summed latency of the successful finishes, in µs.
    finish_us: AtomicU64,
    /// The slowest successful finish: its latency in µs and the epoch ms it was sent.
    slowest_finish: Mutex<(u64, u64)>,
    stopped: AtomicBool,
    started_slots: AtomicUsize,
    all_received: Notify,
}

impl ReceiptLog {
    /// Returns an empty log for `group`'s deliveries of jobs `0..due_ms.len()` due
    /// at `due_ms[i]` (without a group: of the jobs themselves).
    pub(crate) fn for_group(due_ms: Vec<u64>, group: Option<String>) -> ReceiptLog {
        let first_receipt_ms = due_ms.iter().map(|_| AtomicU64::new(0)).collect();
        ReceiptLog {
            due_ms,
            group,
            first_receipt_ms,
            receipts: AtomicU64::new(0),
            distinct: AtomicUsize::new(0),
            unknown: AtomicU64::new(0),
            due_mismatches: AtomicU64::new(0),
            group_mismatches: AtomicU64::new(0),
            pop_errors: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            finish_errors: AtomicU64::new(0),
            last_finish_ms: AtomicU64::new(0),
            finish_us: AtomicU64::new(0),
            slowest_finish: Mutex::new((0, 0)),
            stopped: AtomicBool::new(false),
            started_slots: AtomicUsize::new(0),
            all_received: Notify::new(),
        }
    }

    /// The consumer group this log expects deliveries of.
    pub(crate) fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// Records a receipt of `job` at `received_ms`.
    pub(crate) fn record(&self, job: &PoppedJob, received_ms: u64) {
        self.receipts.fetch_add(1, Ordering::Relaxed);
        if job.group != self.group {
            self.group_mismatches.fetch_add(1, Ordering::Relaxed);
        }
        let Some((index, body_due_ms)) = parse_body_fields(&job.body) else {
            self.unknown.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let (Some(first_receipt), Some(&due_ms)) =
            (self.first_receipt_ms.get(index as usize), self.due_ms.get(index as usize))
        else {
            self.unknown.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if body_due_ms != due_ms || job.run_at_ms != due_ms {
            self.due_mismatches.fetch_add(1, Ordering::Relaxed);
        }
        if first_receipt.compare_exchange(0, received_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            let distinct = self.distinct.fetch_add(1, Ordering::AcqRel) + 1;
            if distinct == self.due_ms.len() {
                self.all_received.notify_one();
            }
        }
    }

    /// Returns `first receipt − due` in ms of every received job.
    pub(crate) fn latenesses_ms(&self) -> Vec<f64> {
        self.latenesses_by_due().into_iter().map(|(_, lateness)| lateness).collect()
    }

    /// Returns the due time and `first receipt − due` in ms of every received job.
    pub(crate) fn latenesses_by_due(&self) -> Vec<(u64, f64)> {
        let receipts = self.first_receipt_ms.iter().map(|receipt| receipt.load(Ordering::Relaxed));
        receipts
            .zip(&self.due_ms)
            .filter(|(received_ms, _)| *received_ms != 0)
            .map(|(received_ms, due_ms)| (*due_ms, received_ms as f64 - *due_ms as f64))
            .collect()
    }

    /// Returns a snapshot of the counters.
    pub(crate) fn counters(&self) -> ReceiptCounters {
        ReceiptCounters {
            expected: self.due_ms.len() as u64,
            received: self.distinct.load(Ordering::Acquire) as u64,
            receipts: self.receipts.load(Ordering::Relaxed),
            unknown: self.unknown.load(Ordering::Relaxed),
            due_mismatches: self.due_mismatches.load(Ordering::Relaxed),
            group_mismatches: self.group_mismatches.load(Ordering::Relaxed),
            pop_errors: self.pop_errors.load(Ordering::Relaxed),
            finished: self.finished.load(Ordering::Relaxed),
            finish_errors: self.finish_errors.load(Ordering::Relaxed),
            last_finish_ms: self.last_finish_ms.load(Ordering::Relaxed),
            finish_us: self.finish_us.load(Ordering::Relaxed),
            slowest_finish: *self.slowest_finish.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }
}

/// The counters of a [`ReceiptLog`] at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReceiptCounters {
    /// Jobs pushed.
    pub(crate) expected: u64,
    /// Distinct jobs received.
    pub(crate) received: u64,
    /// Jobs received, duplicates included.
    pub(crate) receipts: u64,
    /// Receipts of jobs this run did not push.
    pub(crate) unknown: u64,
    /// Receipts whose body `due` or `runAt` differ from the due time pushed.
    pub(crate) due_mismatches: u64,
    /// Receipts shown with another consumer group than the one popped (or with one
    /// where none was popped).
    pub(crate) group_mismatches: u64,
    /// Pops that failed.
    pub(crate) pop_errors: u64,
    /// Jobs finished.
    pub(crate) finished: u64,
    /// Finishes that failed.
    pub(crate) finish_errors: u64,
    /// Epoch ms when the last successful finish was answered; 0 when none was.
    pub(crate) last_finish_ms: u64,
    /// The summed latency of the successful finishes, in µs.
    pub(crate) finish_us: u64,
    /// The slowest successful finish: its latency in µs and the epoch ms it was sent.
    pub(crate) slowest_finish: (u64, u64),
}

impl ReceiptCounters {
    /// Returns the counters of several logs as one: every count summed, so each
    /// group's duplicates and missing deliveries add up; the latest finish and
    /// the slowest one over all of them.
    pub(crate) fn combined(all: impl IntoIterator<Item = ReceiptCounters>) -> ReceiptCounters {
        all.into_iter().fold(ReceiptCounters::default(), |sum, one| ReceiptCounters {
            expected: sum.expected + one.expected,
            received: sum.received + one.received,
            receipts: sum.receipts + one.receipts,
            unknown: sum.unknown + one.unknown,
            due_mismatches: sum.due_mismatches + one.due_mismatches,
            group_mismatches: sum.group_mismatches + one.group_mismatches,
            pop_errors: sum.pop_errors + one.pop_errors,
            finished: sum.finished + one.finished,
            finish_errors: sum.finish_errors + one.finish_errors,
            last_finish_ms: sum.last_finish_ms.max(one.last_finish_ms),
            finish_us: sum.finish_us + one.finish_us,
            slowest_finish: sum.slowest_finish.max(one.slowest_finish),
        })
    }

    /// Records every counter plus `duplicates` and `missing` into `metrics`.
    pub(crate) fn record_into(&self, metrics: &mut crate::report::Metrics) {
        metrics.set("received", self.received as f64);
        metrics.set("receipts", self.receipts as f64);
        metrics.set("duplicates", self.receipts.saturating_sub(self.received + self.unknown) as f64);
        metrics.set("missing", self.expected.saturating_sub(self.received) as f64);
        metrics.set("unknown_receipts", self.unknown as f64);
        metrics.set("due_mismatches", self.due_mismatches as f64);
        metrics.set("pop_errors", self.pop_errors as f64);
        metrics.set("finished", self.finished as f64);
        metrics.set("finish_errors", self.finish_errors as f64);
        if self.finished > 0 {
            metrics.set("finish_latency_ms_mean", self.finish_us as f64 / 1000.0 / self.finished as f64);
        }
    }
}

/// How consumers reach the server.
#[derive(Clone)]
pub(crate) enum Consumer {
    /// `GET /pop` and `POST /finish` on a pool of HTTP/1.1 connections.
    Http {
        /// The pool, one connection per pop and finish slot.
        client: BenchClient,
        /// The full `/pop?topic=&count=&timeout=` URL (with `group=` for a group).
        pop_url: String,
        /// The consumer group whose deliveries are popped and finished.
        group: Option<String>,
    },
    /// `Pop` and `Finish` calls on one HTTP/2 connection.
    Grpc {
        /// The connection.
        client: GrpcClient,
        /// The `Pop` every slot sends.
        pop: PopRequest,
    },
}

impl Consumer {
    async fn pop(&self) -> BenchResult<Vec<PoppedJob>> {
        match self {
            Consumer::Http { client, pop_url, .. } => parse_popped(pop_url, &client.pop_raw(pop_url).await?),
            Consumer::Grpc { client, pop } => client.pop(pop.clone()).await,
        }
    }

    async fn finish(&self, job_id: String) -> BenchResult<bool> {
        match self {
            Consumer::Http { client, group, .. } => client.finish(&job_id, group.as_deref()).await,
            Consumer::Grpc { client, .. } => client.finish(job_id).await,
        }
    }
}

/// How the consumers run.
#[derive(Clone)]
pub(crate) struct ConsumerSettings {
    /// How they reach the server.
    pub(crate) consumer: Consumer,
    /// Concurrent pop slots.
    pub(crate) concurrency: usize,
    /// Concurrent finish slots of a separate finisher pool; `None`: every
    /// slot finishes its own jobs before it pops again.
    pub(crate) finish_concurrency: Option<usize>,
    /// The pop long-poll timeout in ms.
    pub(crate) pop_timeout_ms: u64,
}

/// Running consumers and finishers.
pub(crate) struct ConsumerPool {
    log: Arc<ReceiptLog>,
    consumers: JoinSet<()>,
    finishers: JoinSet<()>,
    pop_timeout: Duration,
}

impl ConsumerPool {
    /// Opens the connections, starts every slot, and returns once each has issued
    /// its first pop; the caller waits for those pops to arrive, once for every pool.
    ///
    /// # Errors
    /// Returns a failure of opening the connections.
    pub(crate) async fn start(settings: &ConsumerSettings, log: Arc<ReceiptLog>) -> BenchResult<ConsumerPool> {
        if let Consumer::Http { client, .. } = &settings.consumer {
            client.open_connections(settings.concurrency + settings.finish_concurrency.unwrap_or(0)).await?;
        }
        let mut finishers = JoinSet::new();
        let mut finish_queues = Vec::new();
        for _ in 0..settings.finish_concurrency.map_or(0, |slots| slots.max(1)) {
            let (sender, receiver) = unbounded_channel();
            finish_queues.push(sender);
            finishers.spawn(finish_slot(settings.consumer.clone(), receiver, Arc::clone(&log)));
        }
        let mut consumers = JoinSet::new();
        for slot in 0..settings.concurrency.max(1) {
            let slot_context = ConsumerSlot {
                consumer: settings.consumer.clone(),
                log: Arc::clone(&log),
                finish_queues: finish_queues.clone(),
                next_queue: slot,
            };
            consumers.spawn(slot_context.run());
        }
        // Only the slots hold the queues now, so the finishers end when the slots do.
        drop(finish_queues);
        while log.started_slots.load(Ordering::Acquire) < settings.concurrency.max(1) {
            tokio::time::sleep(START_POLL).await;
        }
        Ok(ConsumerPool { log, consumers, finishers, pop_timeout: Duration::from_millis(settings.pop_timeout_ms) })
    }

    /// Waits until every job was received or the wall clock reaches `deadline_ms`.
    pub(crate) async fn wait_for_all(&self, deadline_ms: u64) {
        let remaining = Duration::from_millis(deadline_ms.saturating_sub(now_ms()));
        // A timeout is the normal way a run with missing jobs ends.
        let _ = tokio::time::timeout(remaining, self.log.all_received.notified()).await;
    }

    /// Tells the slots to stop: receipts after this are not counted. Telling every
    /// pool before waiting for any lets their last long-polls end together.
    pub(crate) fn signal_stop(&self) {
        self.log.stopped.store(true, Ordering::Release);
    }

    /// Stops the slots (receipts after this are not counted) and drains the finishes.
    pub(crate) async fn stop(mut self) {
        self.signal_stop();
        let slot_grace = self.pop_timeout + Duration::from_secs(2);
        if tokio::time::timeout(slot_grace, drain(&mut self.consumers)).await.is_err() {
            self.consumers.abort_all();
            drain(&mut self.consumers).await;
        }
        if tokio::time::timeout(FINISH_DRAIN_LIMIT, drain(&mut self.finishers)).await.is_err() {
            eprintln!("finishes still outstanding after {FINISH_DRAIN_LIMIT:?}; abandoning them");
            self.finishers.abort_all();
            drain(&mut self.finishers).await;
        }
    }
}

async fn drain(tasks: &mut JoinSet<()>) {
    while tasks.join_next().await.is_some() {}
}

struct ConsumerSlot {
    consumer: Consumer,
    log: Arc<ReceiptLog>,
    /// The finishers' queues; empty when the slot finishes its own jobs.
    finish_queues: Vec<UnboundedSender<String>>,
    next_queue: usize,
}

impl ConsumerSlot {
    async fn run(mut self) {
        self.log.started_slots.fetch_add(1, Ordering::AcqRel);
        while !self.log.stopped.load(Ordering::Acquire) {
            let jobs = self.consumer.pop().await;
            let received_ms = now_ms();
            if self.log.stopped.load(Ordering::Acquire) {
                break;
            }
            let Ok(jobs) = jobs else {
                self.log.pop_errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(POP_ERROR_BACKOFF).await;
                continue;
            };
            for job in &jobs {
                self.log.record(job, received_ms);
            }
            for job in jobs {
                if self.finish_queues.is_empty() {
                    finish_one(&self.consumer, job.id, &self.log).await;
                } else {
                    self.hand_to_finisher(job.id);
                }
            }
        }
    }

    fn hand_to_finisher(&mut self, job_id: String) {
        let slot = self.next_queue.checked_rem(self.finish_queues.len()).unwrap_or_default();
        self.next_queue += 1;
        let handed = self.finish_queues.get(slot).is_some_and(|queue| queue.send(job_id).is_ok());
        if !handed {
            self.log.finish_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn finish_slot(consumer: Consumer, mut queue: UnboundedReceiver<String>, log: Arc<ReceiptLog>) {
    while let Some(job_id) = queue.recv().await {
        finish_one(&consumer, job_id, &log).await;
    }
}

async fn finish_one(consumer: &Consumer, job_id: String, log: &ReceiptLog) {
    let sent_at = std::time::Instant::now();
    let sent_ms = now_ms();
    match consumer.finish(job_id).await {
        Ok(true) => {
            let micros = u64::try_from(sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
            log.finish_us.fetch_add(micros, Ordering::Relaxed);
            let mut slowest = log.slowest_finish.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if micros > slowest.0 {
                *slowest = (micros, sent_ms);
            }
            drop(slowest);
            log.finished.fetch_add(1, Ordering::Relaxed);
            log.last_finish_ms.fetch_max(now_ms(), Ordering::Relaxed);
        }
        _ => {
            log.finish_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn popped(index: u64, due_ms: u64, run_at_ms: u64) -> PoppedJob {
        let Ok(body) = crate::body::job_body(index, due_ms, 100) else { panic!("fits") };
        PoppedJob { id: index.to_string(), run_at_ms, body, group: None }
    }

    #[test]
    fn first_receipts_count_and_duplicates_do_not() {
        let log = ReceiptLog::for_group(vec![100, 200], None);
        log.record(&popped(1, 200, 200), 250);
        log.record(&popped(1, 200, 200), 300);
        log.record(&popped(7, 200, 200), 300);
        log.record(&popped(0, 100, 90), 95);
        let counters = log.counters();
        assert_eq!((counters.received, counters.receipts, counters.unknown), (2, 4, 1));
        assert_eq!(counters.due_mismatches, 1);
        let mut metrics = crate::report::Metrics::default();
        counters.record_into(&mut metrics);
        assert_eq!(metrics.get("duplicates"), Some(1.0));
        assert_eq!(metrics.get("missing"), Some(0.0));
        assert_eq!(log.latenesses_ms(), vec![-5.0, 50.0]);
        assert_eq!(counters.group_mismatches, 0);
    }

    #[test]
    fn a_group_log_counts_receipts_of_another_group() {
        let log = ReceiptLog::for_group(vec![100], Some("g1".to_owned()));
        log.record(&PoppedJob { group: Some("g1".to_owned()), ..popped(0, 100, 100) }, 100);
        log.record(&PoppedJob { group: Some("g2".to_owned()), ..popped(0, 100, 100) }, 100);
        log.record(&popped(0, 100, 100), 100);
        assert_eq!(log.counters().group_mismatches, 2);
        assert_eq!(log.group(), Some("g1"));
    }

    #[test]
    fn combined_counters_sum_each_group_and_keep_the_extremes() {
        let one = ReceiptCounters {
            expected: 10,
            received: 10,
            receipts: 11,
            last_finish_ms: 500,
            slowest_finish: (900, 40),
            ..ReceiptCounters::default()
        };
        let other = ReceiptCounters {
            expected: 10,
            received: 8,
            receipts: 9,
            last_finish_ms: 700,
            slowest_finish: (300, 60),
            ..ReceiptCounters::default()
        };
        let both = ReceiptCounters::combined([one, other]);
        assert_eq!((both.expected, both.received, both.receipts), (20, 18, 20));
        assert_eq!((both.last_finish_ms, both.slowest_finish), (700, (900, 40)));
        let mut metrics = crate::report::Metrics::default();
        both.record_into(&mut metrics);
        assert_eq!(metrics.get("duplicates"), Some(2.0));
        assert_eq!(metrics.get("missing"), Some(2.0));
    }
}
