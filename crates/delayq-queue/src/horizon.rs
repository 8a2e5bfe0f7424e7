//! The horizon: the scheduler holds only the jobs due soon (plus every ready
//! and reserved one); a job due later lives in the store alone until the
//! loader brings it, ahead of its due time.
//!
//! Two marks in the scheduler make it safe without a lock between nodes
//! ([`Scheduler::admit_until`](crate::Scheduler::admit_until)):
//! - the *admission* mark: a push due by it is scheduled at once, one due
//!   later is left to the store. The scheduler decides this atomically with
//!   its own state, so every node agrees on it;
//! - the *loaded* mark: every live job of the store due by it is held.
//!
//! One step of the loader ([`DelayQueue::load_horizon`]) raises the admission
//! mark to `now + horizon` first, then reads the store's live jobs due between
//! the loaded mark and that instant (a range scan on the index of live jobs
//! by due time, a page at a time, fenced like a restore), then raises the
//! loaded mark. A push turned away by the scheduler was committed to the
//! store before the scheduler answered, so before the admission mark moved
//! past it, so before the read: the read finds it. A push the scheduler took
//! may be read too: restoring is idempotent. The marks live with the
//! scheduler's data: a new leader continues from the loaded mark its
//! predecessor left, a step cut short is read again from the same mark, and a
//! scheduler that lost its data has no marks, takes every push again, and is
//! loaded from the start by the restore that follows.
//!
//! Under memory pressure (Redis `used_memory` near `maxmemory`) the loader
//! shrinks the span it loads ahead, down to a floor that keeps it ahead of
//! the timer, so the scheduler stops growing instead of refusing pushes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::scheduler::MemoryUse;
use crate::service::DelayQueue;
use crate::timer::LeaseGate;

/// The admission and loaded marks of a queue without a horizon: an instant no
/// job is due after (2^53 - 1 ms, where Redis's numbers stay exact).
pub const HORIZON_OFF: Timestamp = Timestamp::from_millis((1 << 53) - 1);
/// The fewest steps the loader takes per horizon span.
const STEPS_PER_SPAN: u32 = 60;
/// The shortest and the longest pause between two steps of the loader.
const STEP_BOUNDS: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));
/// The pause after a failed step.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);
/// The share of `maxmemory` from which the loader shrinks its span, and the
/// share at which it loads no further ahead than its floor.
const PRESSURE: (f64, f64) = (0.80, 0.95);

/// The pause between two steps of the loader for a horizon of `span`.
pub fn step_for(span: Duration) -> Duration {
    (span / STEPS_PER_SPAN).clamp(STEP_BOUNDS.0, STEP_BOUNDS.1)
}

/// The span the loader loads ahead when the scheduler's memory is `memory`
/// full: the whole `configured` span below [`PRESSURE`]'s first share, then
/// less and less, down to `floor` at its second.
pub fn span_under_pressure(configured: Duration, memory: Option<MemoryUse>, floor: Duration) -> Duration {
    let Some(MemoryUse { used, max }) = memory else { return configured };
    if max == 0 {
        return configured;
    }
    let share = used as f64 / max as f64;
    let (from, full) = PRESSURE;
    if share < from {
        return configured;
    }
    let kept = ((full - share) / (full - from)).clamp(0.0, 1.0);
    configured.mul_f64(kept).max(floor).min(configured)
}

/// Where the horizon stands on this node, for `/stats` and `/metrics`.
#[derive(Debug, Default)]
pub struct HorizonStatus {
    /// The span loaded ahead now, in ms (shrunk under memory pressure).
    span_ms: AtomicU64,
}

impl HorizonStatus {
    /// A status for a configured span (`None`: no horizon).
    pub fn new(span: Option<Duration>) -> HorizonStatus {
        HorizonStatus { span_ms: AtomicU64::new(span.map_or(0, span_ms)) }
    }

    /// Returns the span loaded ahead now.
    pub fn span(&self) -> Duration {
        Duration::from_millis(self.span_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn set_span(&self, span: Duration) {
        self.span_ms.store(span_ms(span), Ordering::Relaxed);
    }
}

fn span_ms(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

/// Runs the loader until `cancel` fires; does nothing without a horizon, and
/// nothing while `holds_leadership` is false.
pub async fn run_loader(queue: Arc<DelayQueue>, cancel: CancellationToken, holds_leadership: impl Fn() -> bool + Send) {
    let Some(configured) = queue.settings().horizon else { return };
    let every = step_for(configured);
    let floor = every * 4;
    let mut lease = LeaseGate::new("horizon loader", holds_leadership);
    let mut failing = false;
    loop {
        if !lease.pass(&cancel).await {
            return;
        }
        let memory = match queue.scheduler().memory_use().await {
            Ok(memory) => memory,
            Err(error) => {
                debug!(error = %error, "scheduler memory unknown, loading the whole horizon");
                None
            }
        };
        let span = span_under_pressure(configured, memory, floor);
        if span < configured && queue.horizon_status().span() == configured {
            warn!(span_ms = span.as_millis() as u64, "scheduler memory is nearly full, loading less far ahead");
        }
        queue.horizon_status().set_span(span);
        let pause = match queue.load_horizon(Timestamp::now().plus(span)).await {
            Ok(added) => {
                if failing {
                    info!("horizon loader recovered");
                    failing = false;
                }
                if added > 0 {
                    debug!(added, "loaded jobs from the store");
                }
                every
            }
            Err(error) => {
                if !failing {
                    warn!(error = %error, "horizon loader step failed, trying again");
                    failing = true;
                }
                RETRY_AFTER_FAILURE
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);
    const FLOOR: Duration = Duration::from_secs(4);

    fn memory(used: u64) -> Option<MemoryUse> {
        Some(MemoryUse { used, max: 1000 })
    }

    #[test]
    fn the_span_shrinks_with_memory_pressure_down_to_its_floor() {
        assert_eq!(span_under_pressure(HOUR, None, FLOOR), HOUR);
        assert_eq!(span_under_pressure(HOUR, memory(500), FLOOR), HOUR);
        assert_eq!(span_under_pressure(HOUR, memory(799), FLOOR), HOUR);
        let half = span_under_pressure(HOUR, memory(875), FLOOR);
        assert!(half > HOUR / 3 && half < HOUR * 2 / 3, "{half:?}");
        assert_eq!(span_under_pressure(HOUR, memory(950), FLOOR), FLOOR);
        assert_eq!(span_under_pressure(HOUR, memory(2000), FLOOR), FLOOR);
        assert_eq!(span_under_pressure(HOUR, Some(MemoryUse { used: 5, max: 0 }), FLOOR), HOUR);
    }

    #[test]
    fn steps_are_a_sixtieth_of_the_span_within_bounds() {
        assert_eq!(step_for(HOUR), Duration::from_secs(1));
        assert_eq!(step_for(Duration::from_secs(30)), Duration::from_millis(500));
        assert_eq!(step_for(Duration::from_secs(1)), Duration::from_millis(100));
    }
}
