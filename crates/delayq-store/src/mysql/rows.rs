//! MySQL's own part of the row mapping (the rest is in [`crate::sql::rows`]):
//! the assignment list of an update, and how much of a packet a job takes.

use delayq_common::Job;

/// Every column of `job` but `id` as `column = ?`, in the order of
/// [`bind_job_assignments`](crate::sql::binds::bind_job_assignments).
macro_rules! job_assignments {
    () => {
        "bizkey = ?, topic = ?, subtopic = ?, delay = ?, create_time = ?, body = ?, status = ?, \
         ttl = ?, update_time = ?, run_at = ?, ttr = ?, priority = ?, attempt = ?, max_retries = ?, \
         retry_backoff = ?, result = ?, job_groups = ?"
    };
}
pub(super) use job_assignments;

/// Returns about how many bytes `job` adds to a statement packet.
pub(super) fn job_wire_size(job: &Job) -> usize {
    const FIXED_COLUMNS: usize = 9 * 8 + 64;
    let texts = [job.id.as_str(), job.topic.as_str(), job.body.as_str()].iter().map(|text| text.len()).sum::<usize>();
    let optional = [job.biz_key.as_deref(), job.subtopic.as_deref(), job.result.as_deref()]
        .iter()
        .map(|text| text.map_or(0, str::len))
        .sum::<usize>();
    // Each group's name and its separator.
    let groups = job.groups.iter().map(|group| group.as_str().len() + 1).sum::<usize>();
    FIXED_COLUMNS + texts + optional + groups + job.retry_backoff.len() * 21
}

#[cfg(test)]
mod tests {
    use delayq_common::JobState;

    use crate::sql::rows::JOB_COLUMN_COUNT;

    /// `is_live` and `live_bizkey` are derived from the live states in SQL.
    #[test]
    fn the_migration_derives_liveness_from_every_live_state() {
        let schema = include_str!("../../../../sql/mysql/0001_job.sql");
        let names: Vec<String> = JobState::LIVE.iter().map(|state| format!("'{state}'")).collect();
        let derived = format!("status IN ({})", names.join(", "));
        assert_eq!(schema.matches(derived.as_str()).count(), 2, "is_live and live_bizkey");
    }

    #[test]
    fn the_assignment_list_binds_every_column_but_the_id() {
        assert_eq!(job_assignments!().matches('?').count(), JOB_COLUMN_COUNT - 1);
    }
}
