-- The index of live jobs leads with the due time, in buckets of 8192 ms (it led
-- with the id): a restore and the horizon loader read the live jobs due within a
-- window, a page at a time, each page a seek in this index. Within a bucket the
-- jobs follow in id order, so a push appends to the end of its bucket instead of
-- landing on a random page (the width is DUE_BUCKET_MS in
-- crates/delayq-store/src/store.rs). It still carries the topic and the state, so
-- /stats counts the live jobs from it alone.
ALTER TABLE job
    ADD COLUMN due_bucket BIGINT AS (run_at DIV 8192) STORED,
    DROP INDEX job_live_idx,
    ADD INDEX job_live_idx (is_live, due_bucket, id, topic, status);
