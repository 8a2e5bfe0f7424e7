//! What this process did over the last hour, minute by minute: jobs pushed,
//! delivered, finished, failed (given back by a nack) and dead, and how late
//! deliveries were. Kept in the process (the console's overview shows it), so
//! each node knows its own share; nothing is stored.

use std::sync::Mutex;
use std::time::Duration;

use delayq_common::Timestamp;

/// How many minutes are kept.
pub const ACTIVITY_MINUTES: usize = 60;
/// The upper bounds of the lateness buckets, in ms; a last bucket holds the rest.
const LATENESS_BOUNDS_MS: [u64; 16] =
    [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 300_000];
const MINUTE_MS: u64 = 60_000;

/// Something that happened to a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivityEvent {
    /// A push was accepted.
    Pushed,
    /// A job was handed to a consumer or a forwarder.
    Delivered,
    /// A job was acknowledged.
    Finished,
    /// A consumer gave a job back (nack).
    Failed,
    /// A job ran out of retries.
    Dead,
}

impl ActivityEvent {
    /// Every event, in the order of [`MinuteCounts::counts`].
    pub const ALL: [ActivityEvent; 5] = [
        ActivityEvent::Pushed,
        ActivityEvent::Delivered,
        ActivityEvent::Finished,
        ActivityEvent::Failed,
        ActivityEvent::Dead,
    ];

    /// Returns the event's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ActivityEvent::Pushed => "pushed",
            ActivityEvent::Delivered => "delivered",
            ActivityEvent::Finished => "finished",
            ActivityEvent::Failed => "failed",
            ActivityEvent::Dead => "dead",
        }
    }

    fn slot(self) -> usize {
        match self {
            ActivityEvent::Pushed => 0,
            ActivityEvent::Delivered => 1,
            ActivityEvent::Finished => 2,
            ActivityEvent::Failed => 3,
            ActivityEvent::Dead => 4,
        }
    }
}

/// The events of one minute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinuteCounts {
    /// The minute, counted from the epoch.
    pub minute: u64,
    /// How many of each event, in the order of [`ActivityEvent::ALL`].
    pub counts: [u64; 5],
}

impl MinuteCounts {
    /// Returns how many `event`s happened in the minute.
    pub fn of(&self, event: ActivityEvent) -> u64 {
        self.counts.get(event.slot()).copied().unwrap_or(0)
    }
}

/// The last hour, for the console.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivityReport {
    /// One entry per minute of the last hour, oldest first, the current minute last.
    pub minutes: Vec<MinuteCounts>,
    /// Half the deliveries of the hour were at most this late (a bucket's upper bound).
    pub lateness_p50: Option<Duration>,
    /// 99 in 100 deliveries of the hour were at most this late (a bucket's upper bound).
    pub lateness_p99: Option<Duration>,
    /// How many deliveries the lateness is taken over.
    pub deliveries: u64,
}

#[derive(Clone, Copy, Default)]
struct Minute {
    counts: MinuteCounts,
    lateness: [u64; LATENESS_BOUNDS_MS.len() + 1],
}

/// A ring of the last [`ACTIVITY_MINUTES`] minutes. Each record takes a short
/// lock (never held across an await), cheap beside the backend write that
/// goes with every event.
pub struct Activity {
    ring: Mutex<[Minute; ACTIVITY_MINUTES]>,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity { ring: Mutex::new([Minute::default(); ACTIVITY_MINUTES]) }
    }
}

impl Activity {
    /// Counts `count` events of a kind now.
    pub fn record(&self, event: ActivityEvent, count: u64) {
        if count == 0 {
            return;
        }
        self.with_minute(Timestamp::now(), |minute| {
            if let Some(slot) = minute.counts.counts.get_mut(event.slot()) {
                *slot += count;
            }
        });
    }

    /// Counts a delivery of a job due at `run_at`, made at `now`.
    pub fn record_delivery(&self, run_at: Timestamp, now: Timestamp) {
        let late_ms = now.as_millis().saturating_sub(run_at.as_millis());
        let bucket = LATENESS_BOUNDS_MS.iter().position(|bound| late_ms <= *bound).unwrap_or(LATENESS_BOUNDS_MS.len());
        self.with_minute(now, |minute| {
            if let Some(slot) = minute.counts.counts.get_mut(ActivityEvent::Delivered.slot()) {
                *slot += 1;
            }
            if let Some(slot) = minute.lateness.get_mut(bucket) {
                *slot += 1;
            }
        });
    }

    fn with_minute(&self, at: Timestamp, change: impl FnOnce(&mut Minute)) {
        let minute = at.as_millis() / MINUTE_MS;
        let mut ring = self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = ring.get_mut(ring_slot(minute)) {
            if entry.counts.minute != minute {
                *entry = Minute { counts: MinuteCounts { minute, ..MinuteCounts::default() }, ..Minute::default() };
            }
            change(entry);
        }
    }

    /// Returns the last hour as of `now`.
    pub fn report(&self, now: Timestamp) -> ActivityReport {
        let current = now.as_millis() / MINUTE_MS;
        let ring = *self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut minutes = Vec::with_capacity(ACTIVITY_MINUTES);
        let mut lateness = [0u64; LATENESS_BOUNDS_MS.len() + 1];
        for back in (0..ACTIVITY_MINUTES as u64).rev() {
            let minute = current.saturating_sub(back);
            match ring.get(ring_slot(minute)).filter(|entry| entry.counts.minute == minute) {
                Some(entry) => {
                    minutes.push(entry.counts);
                    for (total, count) in lateness.iter_mut().zip(entry.lateness) {
                        *total += count;
                    }
                }
                None => minutes.push(MinuteCounts { minute, ..MinuteCounts::default() }),
            }
        }
        let deliveries = lateness.iter().sum();
        ActivityReport {
            minutes,
            lateness_p50: percentile(&lateness, deliveries, 50),
            lateness_p99: percentile(&lateness, deliveries, 99),
            deliveries,
        }
    }
}

fn ring_slot(minute: u64) -> usize {
    (minute % ACTIVITY_MINUTES as u64) as usize
}

/// The upper bound of the bucket that holds the `percent`th percentile; the
/// last, unbounded bucket reports its lower bound.
fn percentile(buckets: &[u64], total: u64, percent: u64) -> Option<Duration> {
    if total == 0 {
        return None;
    }
    let rank = (total * percent).div_ceil(100).max(1);
    let mut seen = 0;
    for (index, count) in buckets.iter().enumerate() {
        seen += count;
        if seen >= rank {
            let bound = LATENESS_BOUNDS_MS.get(index).or(LATENESS_BOUNDS_MS.last()).copied().unwrap_or(0);
            return Some(Duration::from_millis(bound));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_their_minute_and_old_minutes_fall_out() {
        let activity = Activity::default();
        activity.record(ActivityEvent::Pushed, 3);
        activity.record(ActivityEvent::Dead, 1);
        let now = Timestamp::now();
        let report = activity.report(now);
        assert_eq!(report.minutes.len(), ACTIVITY_MINUTES);
        let last = report.minutes.last().copied().unwrap_or_default();
        assert_eq!((last.of(ActivityEvent::Pushed), last.of(ActivityEvent::Dead)), (3, 1));
        let an_hour_later = activity.report(now.plus(Duration::from_secs(3_600)));
        assert!(an_hour_later.minutes.iter().all(|minute| minute.counts == [0; 5]));
    }

    #[test]
    fn lateness_percentiles_come_from_the_buckets() {
        let activity = Activity::default();
        let now = Timestamp::now();
        for _ in 0..98 {
            activity.record_delivery(now, now);
        }
        activity.record_delivery(Timestamp::from_millis(now.as_millis() - 40), now);
        activity.record_delivery(Timestamp::from_millis(now.as_millis() - 4_000), now);
        let report = activity.report(now);
        assert_eq!(report.deliveries, 100);
        assert_eq!(report.lateness_p50, Some(Duration::from_millis(1)));
        assert_eq!(report.lateness_p99, Some(Duration::from_millis(50)));
        assert_eq!(Activity::default().report(now).lateness_p99, None);
    }
}
