//! SQLite's own SQL fragments of the `job` row (the row mapping itself is in
//! [`crate::sql::rows`]): the live states, and the conflict clause of an insert.

/// The live states as an SQL list; the partial indexes of `sql/sqlite` carry the
/// same literal text, which is what lets SQLite use them.
macro_rules! live_states {
    () => {
        "('delay', 'ready', 'reserved')"
    };
}
pub(super) use live_states;

/// The bucket a live job is indexed by (`job_bucket` in `store.rs`), in the
/// literal text of the expression index `job_live_idx` of `sql/sqlite`, which
/// is what lets SQLite use it.
macro_rules! due_bucket {
    () => {
        "CASE WHEN run_at - update_time > 86400000 THEN run_at / 4194304 * 512 ELSE run_at / 8192 END"
    };
}
pub(super) use due_bucket;

/// The conflict clause of a job insert, setting `status` to the given SQL
/// (a comma-separated list of string literals and macro calls): a push
/// rewrites every column of the row it finds with the same id.
macro_rules! overwrite_on_conflict {
    ($($status:tt)+) => {
        concat!(
            " ON CONFLICT (id) DO UPDATE SET \
             bizkey = excluded.bizkey, topic = excluded.topic, subtopic = excluded.subtopic, \
             delay = excluded.delay, create_time = excluded.create_time, body = excluded.body, \
             status = ",
            $($status)+,
            ", ttl = excluded.ttl, update_time = excluded.update_time, \
             run_at = excluded.run_at, ttr = excluded.ttr, priority = excluded.priority, \
             attempt = excluded.attempt, max_retries = excluded.max_retries, \
             retry_backoff = excluded.retry_backoff, result = excluded.result, \
             job_groups = excluded.job_groups"
        )
    };
}
pub(super) use overwrite_on_conflict;

#[cfg(test)]
mod tests {
    use delayq_common::JobState;

    #[test]
    fn live_states_list_every_live_state() {
        let names: Vec<String> = JobState::LIVE.iter().map(|state| format!("'{state}'")).collect();
        assert_eq!(live_states!(), format!("({})", names.join(", ")));
    }
}
