//! The timer: sleeps until the earliest due job, promotes what is due, and is
//! woken early when a sooner job arrives.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::service::DelayQueue;

/// The longest the timer sleeps without looking, a guard against clock jumps.
const MAX_IDLE: Duration = Duration::from_secs(5);
/// The pause after a failed round (backend down) before trying again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

/// Runs the timer until `cancel` fires.
pub async fn run_timer(queue: Arc<DelayQueue>, cancel: CancellationToken) {
    run_timer_fenced(queue, cancel, || true).await;
}

/// Runs the timer until `cancel` fires or `holds_leadership` turns false
/// (checked before every round, so a node that lost its lease stops at once).
pub async fn run_timer_fenced(
    queue: Arc<DelayQueue>,
    cancel: CancellationToken,
    holds_leadership: impl Fn() -> bool + Send,
) {
    let wakeup = queue.scheduler().wakeup();
    loop {
        if !holds_leadership() {
            warn!("leadership lost, timer stops");
            return;
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
