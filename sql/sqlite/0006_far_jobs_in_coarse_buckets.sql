-- A job due more than a day (86400000 ms) after its last write is indexed in the
-- first bucket of its coarse bucket, 512 buckets wide (4194304 ms, about 70
-- minutes): pushes due days or weeks ahead append to the ends of a few hundred
-- coarse buckets instead of landing on random pages all over the index. The rule
-- and why the loader still reads such a job in time: job_bucket in
-- crates/delayq-store/src/store.rs, which computes the same value; queries repeat
-- the expression exactly (DUE_BUCKET in crates/delayq-store/src/sqlite/mod.rs),
-- as SQLite requires to use the index.
DROP INDEX job_live_idx;
CREATE INDEX job_live_idx ON job (
    CASE WHEN run_at - update_time > 86400000 THEN run_at / 4194304 * 512 ELSE run_at / 8192 END,
    id, topic, status)
    WHERE status IN ('delay', 'ready', 'reserved');
