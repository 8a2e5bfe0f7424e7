//! The timer: sleeps until the earliest due job, promotes what is due, and is
//! woken early when a sooner job arrives.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Clock, Timestamp};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::QueueResult;
use crate::scheduler::Promotion;
use crate::service::DelayQueue;

/// The longest the timer sleeps without looking, a guard against clock jumps.
const MAX_IDLE: Duration = Duration::from_secs(5);
/// How often leader work whose lease lapsed looks whether it was renewed.
const LEASE_RECHECK: Duration = Duration::from_millis(50);
/// The pause after a failed round (backend down) before trying again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

/// The gate of leader work (timer, recovery, forwarder) that must stop while
/// the leader's lease has lapsed: each round passes it first. It waits while the
/// lease is lapsed and lets the work go on once it is renewed for the same term;
/// a lost term ends the work through its cancellation token.
pub struct LeaseGate<F> {
    holds_leadership: F,
    /// The work's name in the log lines.
    work: &'static str,
    paused: bool,
}

impl<F: Fn() -> bool> LeaseGate<F> {
    /// A gate for `work` that asks `holds_leadership` before every round.
    pub fn new(work: &'static str, holds_leadership: F) -> LeaseGate<F> {
        LeaseGate { holds_leadership, work, paused: false }
    }

    /// Returns `true` once the lease is held (at once when it is), `false` when
    /// `cancel` fired while it waited.
    pub async fn pass(&mut self, cancel: &CancellationToken) -> bool {
        loop {
            if (self.holds_leadership)() {
                if self.paused {
                    info!(work = self.work, "leadership lease renewed, resuming");
                    self.paused = false;
                }
                return true;
            }
            if !self.paused {
                warn!(work = self.work, "leadership lease lapsed, pausing until it is renewed");
                self.paused = true;
            }
            tokio::select! {
                () = cancel.cancelled() => return false,
                () = tokio::time::sleep(LEASE_RECHECK) => {}
            }
        }
    }
}

/// Runs the timer until `cancel` fires.
pub async fn run_timer(queue: Arc<DelayQueue>, cancel: CancellationToken) {
    run_timer_fenced(queue, cancel, || true).await;
}

/// Runs the timer until `cancel` fires. `holds_leadership` is checked before
/// every round: while it is false (the lease lapsed) the timer promotes
/// nothing, and it resumes if the lease is renewed for the same term; a lost
/// term ends through `cancel`.
pub async fn run_timer_fenced(
    queue: Arc<DelayQueue>,
    cancel: CancellationToken,
    holds_leadership: impl Fn() -> bool + Send,
) {
    let wakeup = queue.scheduler().wakeup();
    let queue = &queue;
    let lease = LeaseGate::new("timer", holds_leadership);
    promote_until_cancelled(&wakeup, &cancel, lease, &Clock::system(), |now| queue.promote_due(now)).await;
}

/// The loop of every timer: runs `round` (one promotion as of the time it is
/// given, read from `clock`) whenever the earliest due job may have come due
/// or `wakeup` fires, until `cancel` fires; `lease` is passed before every
/// round.
///
/// The server's timer promotes through its [`DelayQueue`], which journals each
/// change; the conformance suite drives a bare [`Scheduler`](crate::Scheduler)
/// with the same loop, so both wait and wake alike.
pub(crate) async fn promote_until_cancelled<F, R>(
    wakeup: &Notify,
    cancel: &CancellationToken,
    mut lease: LeaseGate<F>,
    clock: &Clock,
    round: impl Fn(Timestamp) -> R,
) where
    F: Fn() -> bool,
    R: Future<Output = QueueResult<Promotion>>,
{
    loop {
        if !lease.pass(cancel).await {
            return;
        }
        // Register interest before looking, so a push that lands during the
        // round is not missed.
        let woken = wakeup.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let sleep_for = match round(clock.now()).await {
            Ok(promotion) if promotion.more => {
                tokio::task::yield_now().await;
                continue;
            }
            Ok(promotion) => match promotion.next_due {
                Some(next_due) => next_due.until(clock.now()).min(MAX_IDLE),
                None => MAX_IDLE,
            },
            Err(error) => {
                warn!(error = %error, "timer round failed");
                RETRY_AFTER_FAILURE
            }
        };
        if sleep_for.is_zero() {
            continue;
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = &mut woken => {}
            () = tokio::time::sleep(sleep_for) => {}
        }
    }
}

#[cfg(test)]
mod tests;
