//! The frame of the workloads whose jobs consumers take while they are pushed or
//! after (W2, W4, flow): their consumer flags; the jobs serialized before anything
//! starts; the producer's connections and the consumers opened next, every
//! consumer waiting in a pop before the first push; the pushes timed; and the end
//! of the run, which waits out late duplicates and stops the consumers, with the
//! numbers every such run reports. With `--groups N` the topic gets N consumer
//! groups before the consumers start, and each group its own consumers and
//! receipt log.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use delayq_rpc::pb::v1::PopRequest;
use serde::Serialize;

use crate::client::{pop_path, BenchClient};
use crate::clock::now_ms;
use crate::consumers::{Consumer, ConsumerPool, ConsumerSettings, ReceiptLog};
use crate::error::{BenchError, BenchResult};
use crate::groups::{check_transport, declare_all, group_names, Receipts};
use crate::procstat::CpuSnapshot;
use crate::pushers::{build_units, push_all, JobSpec, Producer, PushMode, PushStats, TransportArgs};
use crate::report::Metrics;
use crate::RunContext;

/// The flags every consumed workload has after its own: the consumers, and how
/// the pushes and the consumers reach the server.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct ConsumedArgs {
    /// Consumer settings.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) consumers: ConsumerArgs,
    /// HTTP or gRPC, for the pushes and the consumers.
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) transport: TransportArgs,
}

/// Consumer flags shared by the lateness, burst and flow workloads.
#[derive(Args, Clone, Debug, Serialize)]
pub(crate) struct ConsumerArgs {
    /// Concurrent long-poll receive slots.
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Jobs asked for per pop (1–100).
    #[arg(long, default_value_t = 100)]
    pub(crate) pop_count: usize,
    /// Long-poll timeout of each pop in ms (0–30000).
    #[arg(long, default_value_t = 1000)]
    pub(crate) pop_timeout_ms: u64,
    /// Acknowledge on a separate pool of this many `/finish` slots, so a pop
    /// never waits for an ack. Unset (the default, W2 of docs/benchmarks.md): each
    /// receive slot finishes the jobs it got, one after another, before it pops again.
    #[arg(long)]
    pub(crate) finish_concurrency: Option<usize>,
    /// Pause after every consumer issued its first pop, before pushing.
    #[arg(long, default_value_t = 500)]
    pub(crate) settle_ms: u64,
    /// Time to keep receiving after the last job, to catch duplicates.
    #[arg(long, default_value_t = 1000)]
    pub(crate) duplicate_wait_ms: u64,
    /// Consumer groups `g0..g{N-1}` to declare on the run's topic before the
    /// consumers start; each gets `--concurrency` slots of its own and must
    /// receive every job once (0: no groups; HTTP only).
    #[arg(long, default_value_t = 0)]
    pub(crate) groups: usize,
}

impl ConsumerArgs {
    /// Returns the consumer settings for `topic` (or `group`'s deliveries of it) on
    /// `server`, reached over `transport`.
    ///
    /// # Errors
    /// As [`TransportArgs::grpc_client`], or an unusable server URL.
    pub(crate) async fn settings(
        &self,
        transport: &TransportArgs,
        server: &str,
        topic: &str,
        group: Option<&str>,
    ) -> BenchResult<ConsumerSettings> {
        let consumer = match transport.grpc_client().await? {
            Some(client) => {
                let pop = PopRequest {
                    topic: topic.to_owned(),
                    count: Some(self.pop_count as i64),
                    timeout_ms: Some(self.pop_timeout_ms as i64),
                    consumer: None,
                    // Groups are refused over gRPC before this (`check_transport`).
                    group: None,
                };
                Consumer::Grpc { client, pop }
            }
            None => {
                let client = BenchClient::new(server, self.concurrency + self.finish_concurrency.unwrap_or(0))?;
                let pop_url = client.url(&pop_path(topic, group, self.pop_count, self.pop_timeout_ms));
                Consumer::Http { client, pop_url, group: group.map(str::to_owned) }
            }
        };
        Ok(ConsumerSettings {
            consumer,
            concurrency: self.concurrency,
            finish_concurrency: self.finish_concurrency,
            pop_timeout_ms: self.pop_timeout_ms,
        })
    }
}

/// What a consumed run pushes, and how.
pub(crate) struct PushPlan<'jobs> {
    jobs: &'jobs [JobSpec],
    body_bytes: usize,
    mode: PushMode,
    batch: usize,
    slots: usize,
    check_late: bool,
}

impl<'jobs> PushPlan<'jobs> {
    /// A plan to push `jobs`, in this order, with bodies of `body_bytes`: as `mode`, `batch`
    /// jobs per batch request, `slots` requests in flight. The indexes of `jobs` are
    /// `0..jobs.len()`, and the `due` each body carries is the due time the
    /// consumers check receipts against. Jobs sent after their due time are not
    /// counted.
    pub(crate) fn new(
        jobs: &'jobs [JobSpec],
        body_bytes: usize,
        mode: PushMode,
        batch: usize,
        slots: usize,
    ) -> PushPlan<'jobs> {
        PushPlan { jobs, body_bytes, mode, batch, slots, check_late: false }
    }

    /// The same plan, counting the jobs sent once their due time had come
    /// (`pushed_late`).
    pub(crate) fn counting_late(self) -> PushPlan<'jobs> {
        PushPlan { check_late: true, ..self }
    }

    /// Each job's body `due` by its index.
    fn due_by_index(&self) -> Vec<u64> {
        let mut due_ms = vec![0; self.jobs.len()];
        for job in self.jobs {
            if let Some(due) = usize::try_from(job.index).ok().and_then(|index| due_ms.get_mut(index)) {
                *due = job.body_due_ms;
            }
        }
        due_ms
    }
}

/// The pushes of a consumed run.
pub(crate) struct Pushed {
    /// Epoch ms just before the first request went out.
    pub(crate) start_ms: u64,
    /// Epoch ms when the last push was answered.
    pub(crate) end_ms: u64,
    /// What the producers saw.
    pub(crate) stats: PushStats,
    jobs: usize,
    check_late: bool,
}

impl Pushed {
    /// Returns how long after `t0_ms` the last push was answered, in ms.
    pub(crate) fn end_after_ms(&self, t0_ms: u64) -> u64 {
        self.end_ms.saturating_sub(t0_ms)
    }

    /// Records `push_end_ms`: [`Pushed::end_after_ms`] of `t0_ms`.
    pub(crate) fn record_end(&self, metrics: &mut Metrics, t0_ms: u64) {
        metrics.set("push_end_ms", self.end_after_ms(t0_ms) as f64);
    }

    /// Records `push_jobs_per_s`: every job over the time from the first request to
    /// the last answer.
    pub(crate) fn record_rate(&self, metrics: &mut Metrics) {
        let elapsed_ms = self.end_ms.saturating_sub(self.start_ms).max(1);
        metrics.set("push_jobs_per_s", self.jobs as f64 * 1000.0 / elapsed_ms as f64);
    }

    /// Records `pushed_late` when the plan counted it, then `push_errors`.
    pub(crate) fn record_outcome(&self, metrics: &mut Metrics) {
        if self.check_late {
            metrics.set("pushed_late", self.stats.pushed_late as f64);
        }
        metrics.set("push_errors", self.stats.job_errors() as f64);
    }
}

/// A run with its consumers started and its jobs pushed.
pub(crate) struct ConsumedRun {
    /// Held until the run stops, so that closing the producer's connections does
    /// not fall into the time the consumers are measured in.
    _producer: Producer,
    /// One pool without groups; one per group with them.
    pools: Vec<ConsumerPool>,
    receipts: Receipts,
    /// The consumer groups declared; 0 without.
    groups: usize,
    duplicate_wait: Duration,
    /// The CPU counters when everything was started, before the first push.
    cpu_before: CpuSnapshot,
    jobs: usize,
}

impl ConsumedRun {
    /// Serializes the jobs of `plan` for `topic`, opens the producer's connections,
    /// declares the groups, starts the consumers of `topic` (of each group) and
    /// waits until every one of them is waiting in a pop; then pushes every job.
    /// Returns the run, its consumers still taking jobs, and the pushes.
    ///
    /// # Errors
    /// [`BenchError::Invalid`] for a plan without jobs (the workloads' `--n` of
    /// 0), jobs that do not fit the body size or groups over gRPC; a failure to
    /// open the connections or to declare a group.
    pub(crate) async fn start_and_push(
        context: &RunContext,
        topic: &str,
        args: &ConsumedArgs,
        plan: &PushPlan<'_>,
    ) -> BenchResult<(ConsumedRun, Pushed)> {
        if plan.jobs.is_empty() {
            return Err(BenchError::Invalid("need n > 0".into()));
        }
        let ConsumedArgs { consumers, transport } = args;
        check_transport(consumers.groups, transport.transport)?;
        let units = Arc::new(build_units(
            topic,
            plan.jobs,
            plan.body_bytes,
            plan.mode,
            plan.batch,
            plan.check_late,
            transport.transport,
        )?);
        let producer = transport.producer(&BenchClient::new(&context.server, plan.slots)?, plan.slots).await?;
        let names = group_names(consumers.groups);
        declare_all(&BenchClient::new(&context.server, 1)?, topic, &names).await?;
        let groups: Vec<Option<&str>> =
            if names.is_empty() { vec![None] } else { names.iter().map(|name| Some(name.as_str())).collect() };
        let due_ms = plan.due_by_index();
        let mut pools = Vec::with_capacity(groups.len());
        let mut logs = Vec::with_capacity(groups.len());
        for group in groups {
            let log = Arc::new(ReceiptLog::for_group(due_ms.clone(), group.map(str::to_owned)));
            let settings = consumers.settings(transport, &context.server, topic, group).await?;
            pools.push(ConsumerPool::start(&settings, Arc::clone(&log)).await?);
            logs.push(log);
        }
        // One pause for every pool: their first pops reach the server meanwhile.
        tokio::time::sleep(Duration::from_millis(consumers.settle_ms)).await;
        let cpu_before = context.probes.cpu_snapshot().await;
        let start_ms = now_ms();
        let stats = push_all(&producer, units, plan.slots).await;
        let end_ms = now_ms();
        let jobs = plan.jobs.len();
        let run = ConsumedRun {
            _producer: producer,
            pools,
            receipts: Receipts::new(logs),
            groups: consumers.groups,
            duplicate_wait: Duration::from_millis(consumers.duplicate_wait_ms),
            cpu_before,
            jobs,
        };
        Ok((run, Pushed { start_ms, end_ms, stats, jobs, check_late: plan.check_late }))
    }

    /// What the consumers have received and finished so far, over every group.
    pub(crate) fn receipts(&self) -> &Receipts {
        &self.receipts
    }

    /// Waits until every job was received (by every group) or the wall clock
    /// reaches `deadline_ms`.
    pub(crate) async fn wait_for_all(&self, deadline_ms: u64) {
        // Each wait ends at once when its pool already has every job.
        for pool in &self.pools {
            pool.wait_for_all(deadline_ms).await;
        }
    }

    /// Waits out late duplicates and stops the consumers. Returns the metrics of
    /// every such run (the job count; with groups the deliveries expected and the
    /// receipts shown with another group; the receipt counters summed over the
    /// groups; CPU per job over the pushes and the consumption) and the receipts,
    /// final now.
    pub(crate) async fn stop(self, context: &RunContext) -> (Metrics, Receipts) {
        tokio::time::sleep(self.duplicate_wait).await;
        for pool in &self.pools {
            pool.signal_stop();
        }
        for pool in self.pools {
            pool.stop().await;
        }
        let cpu_after = context.probes.cpu_snapshot().await;
        let mut metrics = Metrics::default();
        metrics.set("n", self.jobs as f64);
        if self.groups > 0 {
            metrics.set("deliveries", (self.jobs * self.groups) as f64);
        }
        let counters = self.receipts.counters();
        counters.record_into(&mut metrics);
        if self.groups > 0 {
            metrics.set("group_mismatches", counters.group_mismatches as f64);
        }
        for (name, value) in self.cpu_before.micros_per_job(&cpu_after, self.jobs) {
            metrics.set_some(name, value);
        }
        (metrics, self.receipts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::DueTime;

    #[test]
    fn receipts_are_checked_against_each_body_due_by_index() {
        let jobs: Vec<JobSpec> = [2_u64, 0, 1]
            .into_iter()
            .map(|index| JobSpec { index, due: DueTime::RunAtMs(100 + index), body_due_ms: 100 + index })
            .collect();
        let plan = PushPlan::new(&jobs, 100, PushMode::Single, 1, 1);
        assert_eq!(plan.due_by_index(), vec![100, 101, 102]);
    }

    fn consumed_args() -> ConsumedArgs {
        let consumers = ConsumerArgs {
            concurrency: 1,
            pop_count: 1,
            pop_timeout_ms: 0,
            finish_concurrency: None,
            settle_ms: 0,
            duplicate_wait_ms: 0,
            groups: 0,
        };
        let transport = TransportArgs { transport: crate::pushers::Transport::Http, grpc_server: None };
        ConsumedArgs { consumers, transport }
    }

    #[test]
    fn the_shared_flags_are_written_flat_among_the_workload_parameters() {
        let Ok(serde_json::Value::Object(params)) = serde_json::to_value(consumed_args()) else { panic!("an object") };
        let mut names: Vec<&str> = params.keys().map(String::as_str).collect();
        names.sort_unstable();
        let expected = [
            "concurrency",
            "duplicate_wait_ms",
            "finish_concurrency",
            "groups",
            "grpc_server",
            "pop_count",
            "pop_timeout_ms",
            "settle_ms",
            "transport",
        ];
        assert_eq!(names, expected);
        assert_eq!(params.get("transport"), Some(&serde_json::Value::from("http")));
    }

    #[test]
    fn a_run_without_jobs_is_refused_before_anything_opens() {
        let context = RunContext {
            server: "http://127.0.0.1:9".to_owned(),
            probes: crate::procstat::Probes { server: None, redis: None },
        };
        let args = consumed_args();
        let plan = PushPlan::new(&[], 100, PushMode::Single, 1, 1);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let Ok(runtime) = runtime else { panic!("runtime") };
        let started = runtime.block_on(ConsumedRun::start_and_push(&context, "t", &args, &plan));
        assert!(matches!(started, Err(BenchError::Invalid(_))));
    }

    #[test]
    fn groups_over_grpc_are_refused_before_anything_opens() {
        let context = RunContext {
            server: "http://127.0.0.1:9".to_owned(),
            probes: crate::procstat::Probes { server: None, redis: None },
        };
        let mut args = consumed_args();
        args.consumers.groups = 2;
        args.transport = TransportArgs { transport: crate::pushers::Transport::Grpc, grpc_server: None };
        let jobs = [JobSpec { index: 0, due: DueTime::RunAtMs(100), body_due_ms: 100 }];
        let plan = PushPlan::new(&jobs, 100, PushMode::Single, 1, 1);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let Ok(runtime) = runtime else { panic!("runtime") };
        let started = runtime.block_on(ConsumedRun::start_and_push(&context, "t", &args, &plan));
        assert!(matches!(started, Err(BenchError::Invalid(message)) if message.contains("--groups")));
    }

    #[test]
    fn push_numbers_and_late_pushes_only_where_counted() {
        let stats = PushStats { refused_jobs: 2, failed_jobs: 1, pushed_late: 4, ..PushStats::default() };
        let pushed = Pushed { start_ms: 1000, end_ms: 1500, stats, jobs: 100, check_late: true };
        let mut metrics = Metrics::default();
        pushed.record_end(&mut metrics, 900);
        pushed.record_rate(&mut metrics);
        pushed.record_outcome(&mut metrics);
        assert_eq!(metrics.get("push_end_ms"), Some(600.0));
        assert_eq!(metrics.get("push_jobs_per_s"), Some(200.0));
        assert_eq!(metrics.get("pushed_late"), Some(4.0));
        assert_eq!(metrics.get("push_errors"), Some(3.0));

        let unchecked = Pushed { check_late: false, end_ms: 1000, ..pushed };
        let mut metrics = Metrics::default();
        unchecked.record_rate(&mut metrics);
        unchecked.record_outcome(&mut metrics);
        // A push that took no measurable time counts as one ms.
        assert_eq!(metrics.get("push_jobs_per_s"), Some(100_000.0));
        assert_eq!(metrics.get("pushed_late"), None);
    }
}
