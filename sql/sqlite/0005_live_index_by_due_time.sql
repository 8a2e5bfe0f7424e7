-- The index of live jobs leads with the due time, in buckets of 8192 ms (it led
-- with the id): a restore and the horizon loader read the live jobs due within a
-- window, a page at a time, each page a seek in this index. Within a bucket the
-- jobs follow in id order, so a push appends to the end of its bucket instead of
-- landing on a random page (the width is DUE_BUCKET_MS in
-- crates/delayq-store/src/store.rs; queries repeat the expression exactly, as
-- SQLite requires to use the index). It still carries the topic and the state,
-- so /stats counts the live jobs from it alone.
DROP INDEX job_live_idx;
CREATE INDEX job_live_idx ON job (run_at / 8192, id, topic, status)
    WHERE status IN ('delay', 'ready', 'reserved');
