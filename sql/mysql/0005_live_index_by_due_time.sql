-- The index of live jobs leads with the due time (it led with the id): a
-- restore and the horizon loader read the live jobs due within a window, page
-- by page, each page a seek in this index. It still carries the topic and
-- the state, so /stats counts the live jobs from it alone.
ALTER TABLE job
    DROP INDEX job_live_idx,
    ADD INDEX job_live_idx (is_live, run_at, id, topic, status);
