//! What is about to fire: the live jobs by due time (next minute, hour, day,
//! later), counted from the store's index of live jobs by due-time bucket.

use delayq_store::DueCount;

use super::*;

/// The most index entries one range reads: the count stays cheap however many
/// jobs are due, and says "at least" past it.
pub const DUE_SOON_SCAN: usize = 10_000;

/// The live jobs by when they are due. Each range is counted by the store's
/// due-time buckets (8 s wide; about 70 minutes for a job written more than a
/// day before it is due), so a job near a boundary may land in the range before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DueSoon {
    /// Due within the next minute, or overdue (ready, reserved).
    pub minute: DueCount,
    /// Due after the next minute, within the hour.
    pub hour: DueCount,
    /// Due after the next hour, within the day.
    pub day: DueCount,
    /// Due later than a day from now.
    pub later: DueCount,
}

impl DelayQueue {
    /// Counts the live jobs of `topic` (of every topic when `None`) by when
    /// they are due; each range reads at most [`DUE_SOON_SCAN`] index entries.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn due_soon(&self, topic: Option<&Topic>) -> QueueResult<DueSoon> {
        let now = Timestamp::now();
        let minute = due_bucket(now.plus(Duration::from_secs(60)));
        let hour = due_bucket(now.plus(Duration::from_secs(3_600)));
        let day = due_bucket(now.plus(Duration::from_secs(86_400)));
        let store = &self.store;
        let (minute_count, hour_count, day_count, later_count) = futures::try_join!(
            store.count_live_due(topic, 0, minute, DUE_SOON_SCAN),
            store.count_live_due(topic, minute, hour, DUE_SOON_SCAN),
            store.count_live_due(topic, hour, day, DUE_SOON_SCAN),
            store.count_live_due(topic, day, u64::MAX / 2, DUE_SOON_SCAN),
        )?;
        Ok(DueSoon { minute: minute_count, hour: hour_count, day: day_count, later: later_count })
    }
}
