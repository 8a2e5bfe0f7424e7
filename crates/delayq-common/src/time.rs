//! Wall-clock instants in epoch milliseconds.
//!
//! Due times cross process and machine boundaries (the store, Redis, clients),
//! so they are kept as epoch milliseconds rather than `Instant`s.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// An instant in epoch milliseconds (UTC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The epoch itself; used as "long ago".
    pub const EPOCH: Timestamp = Timestamp(0);

    /// Returns the current wall-clock time.
    pub fn now() -> Timestamp {
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        Timestamp(since_epoch.as_millis() as u64)
    }

    /// Builds an instant from epoch milliseconds.
    pub const fn from_millis(epoch_ms: u64) -> Timestamp {
        Timestamp(epoch_ms)
    }

    /// Returns the epoch milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Returns this instant moved `duration` later, saturating.
    pub fn plus(self, duration: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration.as_millis() as u64))
    }

    /// Returns how long after `earlier` this instant is (zero when it is not after).
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// Returns how long from `now` until this instant (zero when it has passed).
    pub fn until(self, now: Timestamp) -> Duration {
        self.since(now)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a component reads the current time: the system's wall clock in the
/// server, any other source a test chooses (one that follows a paused tokio
/// clock, so the timing logic runs to the millisecond without sleeping).
///
/// Cheap to clone; every clone reads the same source.
#[derive(Clone)]
pub struct Clock(Option<Arc<dyn Fn() -> Timestamp + Send + Sync>>);

impl Clock {
    /// The system's wall clock, [`Timestamp::now`].
    pub const fn system() -> Clock {
        Clock(None)
    }

    /// A clock that reads `now`.
    pub fn from_fn(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Clock {
        Clock(Some(Arc::new(now)))
    }

    /// The current time by this clock.
    pub fn now(&self) -> Timestamp {
        match &self.0 {
            None => Timestamp::now(),
            Some(now) => now(),
        }
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_none() { "Clock::system" } else { "Clock::from_fn" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_reads_its_source() {
        assert!(Clock::system().now().as_millis() > 1_577_836_800_000);
        let fixed = Clock::from_fn(|| Timestamp::from_millis(42));
        assert_eq!(fixed.clone().now(), Timestamp::from_millis(42));
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_millis(1_000);
        assert_eq!(t.plus(Duration::from_millis(500)).as_millis(), 1_500);
        assert_eq!(t.since(Timestamp::from_millis(2_000)), Duration::ZERO);
        assert_eq!(t.until(Timestamp::from_millis(400)), Duration::from_millis(600));
        assert_eq!(Timestamp::from_millis(u64::MAX).plus(Duration::from_secs(1)).as_millis(), u64::MAX);
    }

    #[test]
    fn now_is_after_2020() {
        assert!(Timestamp::now().as_millis() > 1_577_836_800_000);
    }
}
