//! The one clock of every workload: wall-clock epoch milliseconds (docs/benchmarks.md).

use std::time::{SystemTime, UNIX_EPOCH};

/// Returns the wall-clock time in epoch milliseconds.
pub(crate) fn now_ms() -> u64 {
    // A clock before 1970 is a broken machine; 0 keeps the arithmetic total.
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since_epoch| since_epoch.as_millis() as u64)
}
