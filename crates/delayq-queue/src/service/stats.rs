//! `/stats`: live jobs from the scheduler, jobs per state from the store (a
//! slow count reused for a while), and where the horizon stands.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Timestamp, Topic};
use delayq_store::StateCount;
use tracing::warn;

use super::DelayQueue;
use crate::error::QueueResult;
use crate::scheduler::{HorizonMarks, TopicStats};

/// A count of the store that took this long or longer is reused for a while.
const SLOW_COUNT: Duration = Duration::from_millis(500);
/// How many times the time a slow count took it is reused for.
const SLOW_COUNT_REUSE: u32 = 10;

/// The last count of the store, when it was taken, and how long it took.
pub(super) struct StoredCounts {
    counts: Vec<StateCount>,
    at: tokio::time::Instant,
    took: Duration,
}

/// The last count of the store any caller took, for readers that must not
/// wait for the next one (the console), and whether one is under way for them.
#[derive(Default)]
pub(super) struct CountsSnapshot {
    last: std::sync::Mutex<Option<(Vec<StateCount>, tokio::time::Instant)>>,
    counting: std::sync::atomic::AtomicBool,
}

impl CountsSnapshot {
    fn remember(&self, counts: &[StateCount]) {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *last = Some((counts.to_vec(), tokio::time::Instant::now()));
    }

    fn last(&self) -> Option<(Vec<StateCount>, tokio::time::Instant)> {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// Counts for `/stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStats {
    /// Live jobs per topic, from the scheduler; with a horizon, the jobs only
    /// the store holds (due beyond it) are counted as delayed too.
    pub live: Vec<TopicStats>,
    /// Jobs per topic and state, from the store.
    pub stored: Vec<StateCount>,
    /// The scheduler backend.
    pub scheduler: &'static str,
    /// The store backend.
    pub store: &'static str,
    /// Where the horizon stands, when there is one (or the scheduler still has marks of one).
    pub horizon: Option<HorizonStats>,
}

/// Where the horizon stands, for `/stats` and `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HorizonStats {
    /// The span the leader loads ahead now (shrunk under memory pressure),
    /// as this node knows it; `None` when the horizon is off here.
    pub span: Option<Duration>,
    /// Pushes due by this instant are scheduled at once.
    pub admitted_until: Timestamp,
    /// Every live job due by this instant is in the scheduler; `None` until the first load.
    pub loaded_until: Option<Timestamp>,
    /// Live jobs the scheduler holds.
    pub hot: u64,
    /// Live jobs only the store holds (due beyond the loaded mark).
    pub cold: u64,
    /// How far the loaded mark is behind `now + span`: more than a loader
    /// step means the loader falls behind.
    pub lag: Duration,
}

impl DelayQueue {
    /// Returns the counts for `/stats`: live jobs from the scheduler, jobs per
    /// state from the store (whose cost does not grow with ended jobs, see
    /// [`delayq_store::JobStore::counts`], and which is reused for a while when it is slow,
    /// see [`DelayQueue::store_counts`]).
    pub async fn stats(&self) -> QueueResult<QueueStats> {
        let live = self.scheduler.stats().await?;
        let stored = self.store_counts().await?;
        self.compose_stats(live, stored).await
    }

    /// Returns the counts as [`DelayQueue::stats`] does, without waiting for
    /// the store once it has been counted: its last count (from any caller)
    /// stands, and when that is `refresh_after` old or older a new count starts
    /// in the background. Returns how old the store's count is. Live jobs the
    /// scheduler holds are counted now. A page that shows the counts stays as
    /// fast at millions of live jobs as at none.
    ///
    /// # Errors
    /// When the scheduler fails, or the store on the first count.
    pub async fn stats_without_waiting(
        self: &Arc<Self>,
        refresh_after: Duration,
    ) -> QueueResult<(QueueStats, Duration)> {
        let (stored, age) = match self.counts_snapshot.last() {
            None => (self.store_counts().await?, Duration::ZERO),
            Some((counts, at)) => {
                let age = at.elapsed();
                if age >= refresh_after && !self.counts_snapshot.counting.swap(true, Ordering::AcqRel) {
                    let queue = Arc::clone(self);
                    tokio::spawn(async move {
                        if let Err(error) = queue.store_counts().await {
                            warn!(error = &error as &dyn std::error::Error, "counting the store failed");
                        }
                        queue.counts_snapshot.counting.store(false, Ordering::Release);
                    });
                }
                (counts, age)
            }
        };
        let live = self.scheduler.stats().await?;
        Ok((self.compose_stats(live, stored).await?, age))
    }

    async fn compose_stats(&self, mut live: Vec<TopicStats>, stored: Vec<StateCount>) -> QueueResult<QueueStats> {
        let horizon = match self.scheduler.horizon().await? {
            Some(marks) => {
                let hot = live.iter().map(|topic| topic.delay + topic.ready + topic.reserved).sum();
                let cold = count_cold_as_delayed(&mut live, &stored);
                Some(self.horizon_stats(marks, hot, cold))
            }
            None => None,
        };
        Ok(QueueStats { live, stored, scheduler: self.scheduler.backend(), store: self.store.backend(), horizon })
    }

    /// Returns the store's counts. The live jobs are counted from an index,
    /// a cost that grows with them: a count that took [`SLOW_COUNT`] or more is
    /// reused for [`SLOW_COUNT_REUSE`] times as long, so that `/stats` and
    /// `/metrics` keep the database at most about a tenth busy however often
    /// they are called. Callers during a count wait for it and share it.
    async fn store_counts(&self) -> QueueResult<Vec<StateCount>> {
        let mut last = self.stored_counts.lock().await;
        if let Some(last) = last.as_ref() {
            if last.took >= SLOW_COUNT && last.at.elapsed() < last.took * SLOW_COUNT_REUSE {
                return Ok(last.counts.clone());
            }
        }
        let started = tokio::time::Instant::now();
        let counts = self.store.counts().await?;
        *last = Some(StoredCounts { counts: counts.clone(), at: tokio::time::Instant::now(), took: started.elapsed() });
        self.counts_snapshot.remember(&counts);
        Ok(counts)
    }

    fn horizon_stats(&self, marks: HorizonMarks, hot: u64, cold: u64) -> HorizonStats {
        let span = self.horizon_span();
        let lag = match (span, marks.loaded) {
            (Some(span), Some(loaded)) => Timestamp::now().plus(span).since(loaded),
            (Some(span), None) => span,
            (None, _) => Duration::ZERO,
        };
        HorizonStats { span, admitted_until: marks.admit, loaded_until: marks.loaded, hot, cold, lag }
    }
}

/// Adds to each topic's delayed count its jobs beyond the horizon: the live
/// jobs of the store the scheduler does not hold. Returns how many it added.
fn count_cold_as_delayed(live: &mut Vec<TopicStats>, stored: &[StateCount]) -> u64 {
    let mut stored_live: std::collections::BTreeMap<&Topic, u64> = std::collections::BTreeMap::new();
    for count in stored.iter().filter(|count| count.state.is_live()) {
        *stored_live.entry(&count.topic).or_default() += count.count;
    }
    let mut cold = 0;
    for (topic, in_store) in stored_live {
        match live.iter_mut().find(|held| held.topic == *topic) {
            Some(held) => {
                let beyond = in_store.saturating_sub(held.delay + held.ready + held.reserved);
                held.delay += beyond;
                cold += beyond;
            }
            None => {
                live.push(TopicStats { topic: topic.clone(), delay: in_store, ready: 0, reserved: 0 });
                cold += in_store;
            }
        }
    }
    cold
}
