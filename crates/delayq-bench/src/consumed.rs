//! The frame of the workloads whose jobs consumers take while they are pushed or
//! after (W2, W4, flow): the producer's connections and the consumers are opened
//! first, every consumer waits in a pop before the first push, and the run ends
//! by waiting out late duplicates and stopping the consumers, with the numbers
//! every such run reports.

use std::sync::Arc;
use std::time::Duration;

use crate::client::BenchClient;
use crate::consumers::{ConsumerPool, ReceiptLog};
use crate::error::BenchResult;
use crate::procstat::CpuSnapshot;
use crate::pushers::{push_all, Producer, PushStats, PushUnit, TransportArgs};
use crate::report::Metrics;
use crate::workload_lateness::ConsumerArgs;
use crate::RunContext;

/// A run with its producer and consumers started.
pub(crate) struct ConsumedRun {
    producer: Producer,
    push_slots: usize,
    pool: ConsumerPool,
    log: Arc<ReceiptLog>,
    duplicate_wait: Duration,
    /// The CPU counters when everything was started, before the first push.
    cpu_before: CpuSnapshot,
}

impl ConsumedRun {
    /// Opens `push_slots` producer connections and starts the consumers of `topic`,
    /// which expect one job per entry of `due_ms`; returns once every consumer is
    /// waiting in a pop.
    ///
    /// # Errors
    /// A failure to open the connections.
    pub(crate) async fn start(
        context: &RunContext,
        topic: &str,
        transport: &TransportArgs,
        consumers: &ConsumerArgs,
        push_slots: usize,
        due_ms: Vec<u64>,
    ) -> BenchResult<ConsumedRun> {
        let producer = transport.producer(&BenchClient::new(&context.server, push_slots)?, push_slots).await?;
        let log = Arc::new(ReceiptLog::new(due_ms));
        let settings = consumers.settings(transport, &context.server, topic).await?;
        let pool = ConsumerPool::start(&settings, Arc::clone(&log)).await?;
        let cpu_before = context.probes.cpu_snapshot().await;
        let duplicate_wait = Duration::from_millis(consumers.duplicate_wait_ms);
        Ok(ConsumedRun { producer, push_slots, pool, log, duplicate_wait, cpu_before })
    }

    /// What the consumers have received and finished so far.
    pub(crate) fn log(&self) -> &ReceiptLog {
        &self.log
    }

    /// Pushes every unit, `push_slots` requests in flight.
    pub(crate) async fn push(&self, units: Arc<Vec<PushUnit>>) -> PushStats {
        push_all(&self.producer, units, self.push_slots).await
    }

    /// Waits until every job was received or the wall clock reaches `deadline_ms`.
    pub(crate) async fn wait_for_all(&self, deadline_ms: u64) {
        self.pool.wait_for_all(deadline_ms).await;
    }

    /// Waits out late duplicates and stops the consumers. Returns the metrics of
    /// every such run (the job count, the receipt counters, CPU per job over the
    /// pushes and the consumption) and the log, final now.
    pub(crate) async fn stop(self, context: &RunContext, jobs: usize) -> (Metrics, Arc<ReceiptLog>) {
        tokio::time::sleep(self.duplicate_wait).await;
        self.pool.stop().await;
        let cpu_after = context.probes.cpu_snapshot().await;
        let mut metrics = Metrics::default();
        metrics.set("n", jobs as f64);
        let counters = self.log.counters();
        counters.record_into(&mut metrics);
        for (name, value) in self.cpu_before.micros_per_job(&cpu_after, jobs) {
            metrics.set_some(name, value);
        }
        (metrics, self.log)
    }
}
