-- The listing index leads with the id instead of the due time, as in SQLite:
-- a push appends to it instead of landing on a random page of it. Listing a
-- topic's jobs in a state, oldest due first, reads the (topic, status) range of
-- this covering index and sorts it; the rows of the page are read after.
ALTER TABLE job
    DROP INDEX job_topic_status_run_at_idx,
    ADD INDEX job_topic_status_id_idx (topic, status, id, run_at);
