//! Waiting for something that happens in the background (a delivery, an
//! election, a recovery) without a fixed sleep: a test polls until it holds.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The pause between two checks: short enough that a test waits little past
/// the moment it could go on, long enough that a check reading a database or
/// a broker does not load it.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// An answer of a check: whether the wait is over.
pub trait Settled {
    /// Whether the answer ends the wait.
    fn is_settled(&self) -> bool;
}

/// `true` ends the wait.
impl Settled for bool {
    fn is_settled(&self) -> bool {
        *self
    }
}

/// `Some` ends the wait, carrying what was found.
impl<T> Settled for Option<T> {
    fn is_settled(&self) -> bool {
        self.is_some()
    }
}

/// `Ok` ends the wait; an `Err` is retried until the limit.
impl<T, E> Settled for Result<T, E> {
    fn is_settled(&self) -> bool {
        self.is_ok()
    }
}

/// Runs `check` until its answer is settled (`true`, `Some`, `Ok`) or `limit`
/// has passed, and returns the last answer: the test asserts on it with a
/// message of its own, or takes the value it carries.
///
/// The check runs at least once, and once more after the limit, so a slow
/// check never loses its last chance. The clock is Tokio's: under paused time
/// the wait advances with the test's clock instead of the wall's.
pub async fn eventually<A, F, Fut>(limit: Duration, mut check: F) -> A
where
    A: Settled,
    F: FnMut() -> Fut,
    Fut: Future<Output = A>,
{
    let deadline = Instant::now() + limit;
    loop {
        let answer = check().await;
        if answer.is_settled() || Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_condition_met_later_ends_the_wait_when_it_is_met() {
        let checks = AtomicU32::new(0);
        let started = Instant::now();
        let met = eventually(Duration::from_secs(5), || async { checks.fetch_add(1, Ordering::Relaxed) == 3 }).await;
        assert!(met);
        assert_eq!(checks.load(Ordering::Relaxed), 4);
        assert_eq!(started.elapsed(), POLL_INTERVAL * 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_condition_never_met_ends_the_wait_at_the_limit() {
        let started = Instant::now();
        let met = eventually(Duration::from_secs(2), || async { false }).await;
        assert!(!met);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_secs(2) && waited < Duration::from_secs(2) + POLL_INTERVAL * 2, "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_value_found_is_returned_and_the_last_error_when_none_is() {
        let checks = AtomicU32::new(0);
        let found = eventually(Duration::from_secs(1), || async {
            let count = checks.fetch_add(1, Ordering::Relaxed);
            (count >= 2).then_some(count)
        })
        .await;
        assert_eq!(found, Some(2));
        let failed: Result<(), u32> =
            eventually(Duration::from_millis(120), || async { Err(checks.fetch_add(1, Ordering::Relaxed)) }).await;
        assert_eq!(failed, Err(6), "checked at 0, 50, 100 and 150 ms");
    }
}
