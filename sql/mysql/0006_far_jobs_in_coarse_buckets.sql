-- A job due more than a day (86400000 ms) after its last write is indexed in the
-- first bucket of its coarse bucket, 512 buckets wide (4194304 ms, about 70
-- minutes): pushes due days or weeks ahead append to the ends of a few hundred
-- coarse buckets instead of landing on random pages all over the index. The rule
-- and why the loader still reads such a job in time: job_bucket in
-- crates/delayq-store/src/store.rs, which computes the same value.
ALTER TABLE job MODIFY COLUMN due_bucket BIGINT
    AS (IF(run_at - update_time > 86400000, run_at DIV 4194304 * 512, run_at DIV 8192)) STORED;
