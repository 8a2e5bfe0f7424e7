//! Where beanstalkd's model and delayq's differ: priorities, ids, states,
//! time-to-run and retries.

use std::time::Duration;

use delayq_common::push::{MAX_RETRIES_LIMIT, MAX_TTR};
use delayq_common::{JobId, JobState};

/// The lowest beanstalkd priority of each delayq priority (0 to 4): beanstalkd's
/// urgent jobs (below 1024) are delayq's 0, and the defaults clients commonly
/// send (1024, 65536) each start a priority of their own, so that they read
/// back unchanged. Lower numbers stay more urgent, so the order clients
/// observe among jobs of different bands is beanstalkd's.
const BAND_STARTS: [u32; 5] = [0, 1_024, 65_536, 1 << 24, 1 << 31];

/// Returns delayq's priority for a beanstalkd priority.
pub(crate) fn priority_of(beanstalk_priority: u32) -> u8 {
    let band = BAND_STARTS.iter().rposition(|start| *start <= beanstalk_priority).unwrap_or(0);
    u8::try_from(band).unwrap_or(u8::MAX)
}

/// Returns the beanstalkd priority shown for a delayq priority: its band's lowest.
pub(crate) fn beanstalk_priority(priority: u8) -> u32 {
    let last = BAND_STARTS.len() - 1;
    BAND_STARTS.get(usize::from(priority)).or(BAND_STARTS.get(last)).copied().unwrap_or(0)
}

/// The shortest time-to-run: beanstalkd raises `ttr 0` to one second.
const MIN_TTR: Duration = Duration::from_secs(1);

/// Returns the time-to-run given to a job put with `ttr`: at least a second
/// (as beanstalkd), at most delayq's longest.
pub(crate) fn ttr_of(ttr: Duration) -> Duration {
    ttr.clamp(MIN_TTR, MAX_TTR)
}

/// How many redeliveries a job put over beanstalk allows: beanstalkd has no
/// such bound, so the largest delayq accepts.
pub(crate) const MAX_RETRIES: u64 = MAX_RETRIES_LIMIT;

/// Returns the beanstalk id of a job: its id when that is a decimal number
/// without leading zeros (every id delayq generates is), else `None`.
pub(crate) fn beanstalk_id(id: &JobId) -> Option<u64> {
    let text = id.as_str();
    let canonical = !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) && !text.starts_with('0');
    if canonical {
        text.parse().ok()
    } else {
        None
    }
}

/// Returns the delayq id a beanstalk id names.
pub(crate) fn job_id(id: u64) -> Option<JobId> {
    JobId::parse(id.to_string()).ok()
}

/// Returns beanstalkd's name of a state a job can be seen in, `None` for the
/// ended ones (beanstalkd forgets a job once deleted).
pub(crate) fn state_name(state: JobState) -> Option<&'static str> {
    match state {
        JobState::Delay => Some("delayed"),
        JobState::Ready => Some("ready"),
        JobState::Reserved => Some("reserved"),
        JobState::Dead => Some("buried"),
        JobState::Finished | JobState::Deleted | JobState::Expired => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_keep_their_order_and_common_values_round_trip() {
        let samples = [0, 1, 1_023, 1_024, 65_535, 65_536, (1 << 24) - 1, 1 << 24, (1 << 31) - 1, 1 << 31, u32::MAX];
        let mapped: Vec<u8> = samples.iter().map(|pri| priority_of(*pri)).collect();
        assert_eq!(mapped, [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
        assert!(mapped.windows(2).all(|pair| pair[0] <= pair[1]), "a lower beanstalk priority is never less urgent");
        for common in [0, 1_024, 65_536] {
            assert_eq!(beanstalk_priority(priority_of(common)), common);
        }
        assert_eq!(beanstalk_priority(200), 1 << 31);
    }

    #[test]
    fn only_canonical_decimal_ids_have_a_beanstalk_id() {
        let id = |text: &str| JobId::parse(text).unwrap();
        assert_eq!(beanstalk_id(&id("123")), Some(123));
        assert_eq!(beanstalk_id(&id("0123")), None);
        assert_eq!(beanstalk_id(&id("order-1")), None);
        assert_eq!(beanstalk_id(&id("99999999999999999999")), None, "past u64");
        assert_eq!(job_id(42).map(|id| id.as_str().to_owned()), Some("42".to_owned()));
    }

    #[test]
    fn ttr_is_at_least_a_second() {
        assert_eq!(ttr_of(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(ttr_of(Duration::from_secs(30)), Duration::from_secs(30));
        assert_eq!(ttr_of(Duration::from_secs(u64::from(u32::MAX))), MAX_TTR);
    }
}
