//! The mulberry32 generator of docs/benchmarks.md and the random choices built on it,
//! bit for bit the same as the peers' `lib/common.js` and `lib/workload.py`.

/// The 32-bit mulberry32 generator.
#[derive(Clone, Debug)]
pub(crate) struct Mulberry32 {
    state: u32,
}

impl Mulberry32 {
    /// Returns a generator seeded with `seed`.
    pub(crate) fn new(seed: u32) -> Mulberry32 {
        Mulberry32 { state: seed }
    }

    /// Returns the next 32-bit output.
    pub(crate) fn next_u32(&mut self) -> u32 {
        self.state = self.state.wrapping_add(0x6D2B_79F5);
        let mut mixed = self.state;
        mixed = (mixed ^ (mixed >> 15)).wrapping_mul(mixed | 1);
        mixed ^= mixed.wrapping_add((mixed ^ (mixed >> 7)).wrapping_mul(mixed | 61));
        mixed ^ (mixed >> 14)
    }
}

/// Maps a 32-bit output to `[0, span)`: `(u * span) >> 32` in 64-bit arithmetic.
pub(crate) fn below(output: u32, span: u64) -> u64 {
    (u64::from(output) * span) >> 32
}

/// Returns the delays of workload 1: `delay_min + below(u_i, delay_max − delay_min + 1)`.
pub(crate) fn uniform_delays(seed: u32, count: usize, delay_min_ms: u64, delay_max_ms: u64) -> Vec<u64> {
    debug_assert!(delay_min_ms <= delay_max_ms);
    let span = delay_max_ms - delay_min_ms + 1;
    let mut generator = Mulberry32::new(seed);
    (0..count).map(|_| delay_min_ms + below(generator.next_u32(), span)).collect()
}

/// Returns the Fisher–Yates push order of workload 2: a permutation of `0..count`.
pub(crate) fn shuffled_order(seed: u32, count: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..count).collect();
    let mut generator = Mulberry32::new(seed);
    for last in (1..count).rev() {
        let picked = below(generator.next_u32(), last as u64 + 1) as usize;
        order.swap(last, picked);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_one_matches_the_test_vector() {
        let mut generator = Mulberry32::new(1);
        let outputs: Vec<u32> = (0..3).map(|_| generator.next_u32()).collect();
        assert_eq!(outputs, vec![2_693_262_067, 11_749_833, 2_265_367_787]);
    }

    #[test]
    fn push_delays_match_the_test_vector() {
        assert_eq!(uniform_delays(1, 5, 20_000, 40_000), vec![32_542, 20_054, 30_549, 39_622, 39_368]);
    }

    #[test]
    fn fisher_yates_matches_the_test_vector() {
        assert_eq!(shuffled_order(2, 10), vec![0, 9, 4, 1, 6, 5, 3, 8, 2, 7]);
    }

    #[test]
    fn below_stays_in_range() {
        assert_eq!(below(u32::MAX, 10), 9);
        assert_eq!(below(0, 10), 0);
        assert_eq!(below(u32::MAX, 1), 0);
    }

    #[test]
    fn tiny_orders_are_identity() {
        assert_eq!(shuffled_order(2, 0), Vec::<usize>::new());
        assert_eq!(shuffled_order(2, 1), vec![0]);
    }
}
