//! Reserving ready jobs across shards, and long-polling for them across nodes.
//!
//! A topic's ready jobs are spread over every shard. Looking at all shards on
//! every pop would cost a round of calls per consumer, so each node keeps,
//! per topic, hints of the shards that may hold ready jobs (raised by the
//! scripts' ready signals, see `notify.rs`) and the time of its last full
//! scan. A pop looks at the hinted shards; only when they yield nothing and
//! no full scan is fresh does it look at every shard. A shard left with ready
//! jobs is hinted again, so the next consumer goes straight to it. A pop that
//! does not wait and found nothing while another pop of the node held the
//! hints waits for that look to end and looks again, so that it does not
//! answer none while jobs are ready.
//!
//! When several shards have ready jobs, their heads are read first and the
//! `count` most urgent (priority, then run_at) are popped from the shards that
//! hold them, so priority order holds across shards as well as within one.

use std::time::Duration;

use delayq_common::{Job, Topic};
use futures::future::{join_all, try_join_all};
use tokio::time::Instant;
use tracing::warn;

use super::notify::TopicSignal;
use super::runner::ScriptRunner;
use crate::error::QueueResult;

/// The longest a waiting consumer sleeps before looking again on its own,
/// a guard against lost signals.
const RESCAN_EVERY: Duration = Duration::from_secs(1);
/// The longest wait honoured (a day), for waits too large to add to a clock.
const MAX_WAIT: Duration = Duration::from_secs(86_400);

impl ScriptRunner {
    /// Reserves up to `count` ready jobs of `topic`, waiting up to `wait` for the first.
    pub(super) async fn reserve_jobs(&self, topic: &Topic, count: usize, wait: Duration) -> QueueResult<Vec<Job>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let signal = self.signals.topic(topic.as_str());
        let start = Instant::now();
        let deadline = start.checked_add(wait).unwrap_or(start + MAX_WAIT);
        loop {
            // Listen before looking, so a signal raised in between is not
            // missed. A pop that does not wait never listens: were it counted
            // among the waiters, it could take the wakeup a look hands on to
            // the next waiting pop.
            let notified = signal.notify.notified();
            tokio::pin!(notified);
            if !wait.is_zero() {
                notified.as_mut().enable();
            }
            let jobs = self.reserve_now(topic, &signal, count).await?;
            let now = Instant::now();
            if !jobs.is_empty() {
                return Ok(jobs);
            }
            if wait.is_zero() {
                // A pop that does not wait may have come while another pop of
                // this node held the hints of ready jobs it will not all take;
                // that pop hints them again when its look ends. Answering none
                // before that would leave them to the next poll, however late.
                let looked = signal.looked.notified();
                let held = signal.held_elsewhere();
                let grace = start + self.timeout;
                if (!held && !signal.has_hints()) || now >= grace {
                    return Ok(jobs);
                }
                if held {
                    let _ = tokio::time::timeout_at(grace, looked).await;
                }
                continue;
            }
            // A pop that waits was woken whenever a look left jobs behind.
            if now >= deadline {
                return Ok(jobs);
            }
            let nap = (deadline - now).min(RESCAN_EVERY);
            let _ = tokio::time::timeout(nap, notified).await;
        }
    }

    /// One look: the hinted shards, then every shard when that found nothing
    /// and the last full scan is stale.
    async fn reserve_now(&self, topic: &Topic, signal: &TopicSignal, count: usize) -> QueueResult<Vec<Job>> {
        let start = self.next_start();
        let mut jobs = Vec::new();
        // Held to the end of the look, after the shards it leaves jobs in are hinted again.
        let (hinted, _hold) = signal.take_hints(start);
        let mut outcome = self.reserve_from(topic, signal, &hinted, count, &mut jobs).await;
        let epoch = self.signals.live_epoch();
        if outcome.is_ok() && jobs.is_empty() && !signal.scan_is_fresh(epoch) {
            let started = Instant::now();
            let every_shard: Vec<usize> =
                (0..self.shards.len()).map(|step| (start + step) % self.shards.len()).collect();
            outcome = self.reserve_from(topic, signal, &every_shard, count, &mut jobs).await;
            if outcome.is_ok() {
                signal.record_scan(started, epoch);
            }
        }
        if signal.has_hints() {
            // Pass the baton: another consumer of this node can take what is left.
            signal.notify.notify_one();
        }
        jobs.sort_by_key(|job| (job.priority, job.run_at));
        match outcome {
            Ok(()) => Ok(jobs),
            // Jobs already reserved are handed out; the failure shows on the next call.
            Err(error) if !jobs.is_empty() => {
                warn!(error = %error, topic = %topic, "reserve stopped early");
                Ok(jobs)
            }
            Err(error) => Err(error),
        }
    }

    /// Reserves the `count` most urgent ready jobs held by `shards`; hints
    /// every shard it leaves with ready jobs (or could not look at).
    async fn reserve_from(
        &self,
        topic: &Topic,
        signal: &TopicSignal,
        shards: &[usize],
        count: usize,
        jobs: &mut Vec<Job>,
    ) -> QueueResult<()> {
        let plan = match shards {
            [] => return Ok(()),
            [only] => vec![(*only, count)],
            several => match self.plan_pops(topic, several, count).await {
                Ok(plan) => plan,
                Err(error) => {
                    several.iter().for_each(|&shard| signal.hint(shard));
                    return Err(error);
                }
            },
        };
        let pops = join_all(plan.iter().map(|&(shard, take)| async move {
            if take == 0 {
                // It holds ready jobs, just not among the most urgent.
                return Ok((Vec::new(), 1));
            }
            match self.shards.get(shard) {
                Some(keys) => self.reserve(keys, topic, take).await,
                None => Ok((Vec::new(), 0)),
            }
        }))
        .await;
        let mut failure = None;
        for (&(shard, _), popped) in plan.iter().zip(pops) {
            match popped {
                Ok((popped, left)) => {
                    jobs.extend(popped);
                    if left > 0 {
                        signal.hint(shard);
                    }
                }
                Err(error) => {
                    signal.hint(shard);
                    failure.get_or_insert(error);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Reads the first `count` ready scores of each shard and returns how many
    /// jobs to pop from each shard that has any, most urgent shard first.
    async fn plan_pops(&self, topic: &Topic, shards: &[usize], count: usize) -> QueueResult<Vec<(usize, usize)>> {
        let heads = try_join_all(shards.iter().map(|&shard| async move {
            match self.shards.get(shard) {
                Some(keys) => self.peek_ready(keys, topic, count).await,
                None => Ok(Vec::new()),
            }
        }))
        .await?;
        let mut scores: Vec<(u64, usize)> = Vec::new();
        for (position, head) in heads.iter().enumerate() {
            scores.extend(head.iter().map(|&score| (score, position)));
        }
        scores.sort_unstable();
        let mut takes = vec![0usize; shards.len()];
        for &(_, position) in scores.iter().take(count) {
            if let Some(take) = takes.get_mut(position) {
                *take += 1;
            }
        }
        let mut plan: Vec<(u64, usize, usize)> = heads
            .iter()
            .zip(shards.iter().zip(takes))
            .filter_map(|(head, (&shard, take))| head.first().map(|&best| (best, shard, take)))
            .collect();
        plan.sort_unstable();
        Ok(plan.into_iter().map(|(_, shard, take)| (shard, take)).collect())
    }
}
