//! The timer: sleeps until the earliest due job, promotes what is due, and is
//! woken early when a sooner job arrives.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::service::DelayQueue;

/// The longest the timer sleeps without looking, a guard against clock jumps.
const MAX_IDLE: Duration = Duration::from_secs(5);
/// How often leader work whose lease lapsed looks whether it was renewed.
const LEASE_RECHECK: Duration = Duration::from_millis(50);
/// The pause after a failed round (backend down) before trying again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

/// The pause of leader work (timer, recovery, forwarder) while its lease has
/// lapsed: waits one re-check interval; returns `false` when `cancel` fired.
pub async fn lease_pause(cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(LEASE_RECHECK) => true,
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
    let mut paused = false;
    loop {
        if !holds_leadership() {
            if !paused {
                warn!("leadership lease lapsed, timer pauses until it is renewed");
                paused = true;
            }
            if lease_pause(&cancel).await {
                continue;
            }
            return;
        }
        if paused {
            info!("leadership lease renewed, timer resumes");
            paused = false;
        }
        // Register interest before looking, so a push that lands during the
        // round is not missed.
        let woken = wakeup.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let now = Timestamp::now();
        let sleep_for = match queue.promote_due(now).await {
            Ok(promotion) if promotion.more => {
                tokio::task::yield_now().await;
                continue;
            }
            Ok(promotion) => match promotion.next_due {
                Some(next_due) => next_due.until(Timestamp::now()).min(MAX_IDLE),
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
