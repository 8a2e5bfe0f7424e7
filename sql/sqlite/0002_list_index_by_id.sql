-- The listing index leads with the id instead of the due time.
--
-- The ids delayq assigns are snowflakes, so a push appends to this index
-- instead of landing on a random page of it: with (topic, status, run_at, id)
-- every pushed job dirtied a page of its own, which made that index most of the
-- cost of a push. Listing a topic's jobs in a state, oldest due first, now
-- reads the covering (topic, status) range of this index and sorts it; the
-- rows of the page are fetched after. The counts use it as before.
DROP INDEX job_topic_status_run_at_idx;
CREATE INDEX job_topic_status_id_idx ON job (topic, status, id, run_at);
