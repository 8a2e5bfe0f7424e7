//! A clock for tests of timing logic.

use delayq_common::{Clock, Timestamp};

/// A [`Clock`] that starts at the wall time and then advances with tokio's
/// clock. On a runtime started paused (`#[tokio::test(start_paused = true)]`)
/// tokio's clock jumps to the next timer whenever every task waits, so a test
/// of a 30-second ttr takes no real time and its instants are exact.
pub fn tokio_clock() -> Clock {
    let origin = tokio::time::Instant::now();
    let start = Timestamp::now();
    Clock::from_fn(move || start.plus(origin.elapsed()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_the_paused_tokio_clock() {
        let clock = tokio_clock();
        let start = clock.now();
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert_eq!(clock.now(), start.plus(Duration::from_secs(3_600)));
    }
}
