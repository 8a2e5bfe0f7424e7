//! Snowflake ids: 41 bits of milliseconds since 2024-01-01, 10 bits of
//! worker id, 12 bits of sequence.
//!
//! Ids from one generator are unique and strictly increasing, also when the
//! wall clock steps back: the generator then keeps counting on its last
//! millisecond (borrowing from the future) instead of reusing a past one.

use std::sync::Mutex;

use crate::time::Timestamp;

/// The custom epoch, 2024-01-01T00:00:00Z, in epoch milliseconds.
pub const SNOWFLAKE_EPOCH_MS: u64 = 1_704_067_200_000;
/// The number of distinct worker ids.
pub const MAX_WORKERS: u16 = 1 << WORKER_BITS;

const WORKER_BITS: u32 = 10;
const SEQUENCE_BITS: u32 = 12;
const SEQUENCE_MASK: u64 = (1 << SEQUENCE_BITS) - 1;

/// A thread-safe snowflake id generator for one worker id.
#[derive(Debug)]
pub struct Snowflake {
    worker_id: u16,
    /// The last (millisecond, sequence) handed out; a short critical section, never held across `.await`.
    last: Mutex<(u64, u64)>,
}

impl Snowflake {
    /// Creates a generator; the worker id is taken modulo [`MAX_WORKERS`].
    pub fn new(worker_id: u16) -> Snowflake {
        Snowflake { worker_id: worker_id % MAX_WORKERS, last: Mutex::new((0, 0)) }
    }

    /// Returns this generator's worker id.
    pub fn worker_id(&self) -> u16 {
        self.worker_id
    }

    /// Returns the next id.
    pub fn next_id(&self) -> u64 {
        self.next_id_at(Timestamp::now())
    }

    /// Returns the next id as if the clock read `now`.
    pub fn next_id_at(&self, now: Timestamp) -> u64 {
        let clock_ms = now.as_millis().saturating_sub(SNOWFLAKE_EPOCH_MS);
        let mut last = self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (last_ms, last_sequence) = *last;
        let (ms, sequence) = if clock_ms > last_ms {
            (clock_ms, 0)
        } else if last_sequence < SEQUENCE_MASK {
            (last_ms, last_sequence + 1)
        } else {
            // The millisecond is used up (or the clock went back): move on to the next one.
            (last_ms + 1, 0)
        };
        *last = (ms, sequence);
        (ms << (WORKER_BITS + SEQUENCE_BITS)) | (u64::from(self.worker_id) << SEQUENCE_BITS) | sequence
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn unique_across_threads() {
        let generator = Arc::new(Snowflake::new(7));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let generator = Arc::clone(&generator);
                std::thread::spawn(move || (0..20_000).map(|_| generator.next_id()).collect::<Vec<_>>())
            })
            .collect();
        let mut seen = HashSet::new();
        for handle in handles {
            for id in handle.join().unwrap() {
                assert!(seen.insert(id), "duplicate id {id}");
            }
        }
        assert_eq!(seen.len(), 160_000);
    }

    #[test]
    fn monotonic_when_the_clock_steps_back() {
        let generator = Snowflake::new(1);
        let t = Timestamp::from_millis(SNOWFLAKE_EPOCH_MS + 10_000);
        let first = generator.next_id_at(t);
        let after_step_back = generator.next_id_at(Timestamp::from_millis(t.as_millis() - 5_000));
        assert!(after_step_back > first);
        let later = generator.next_id_at(t.plus(std::time::Duration::from_millis(1)));
        assert!(later > after_step_back);
    }

    #[test]
    fn sequence_overflow_moves_to_next_millisecond() {
        let generator = Snowflake::new(3);
        let t = Timestamp::from_millis(SNOWFLAKE_EPOCH_MS + 1);
        let ids: Vec<u64> = (0..5_000).map(|_| generator.next_id_at(t)).collect();
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!((ids[0] >> 12) & 0x3ff, 3, "worker id is embedded");
    }
}
