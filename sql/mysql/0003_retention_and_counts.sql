-- Retention of ended jobs, and /stats counts whose cost does not grow with
-- them. The same design as sql/sqlite/0003, without triggers (creating one
-- needs privileges a delayq user often lacks where binary logging is on):
-- delayq's writer keeps job_ended_count in the transaction that writes the
-- job rows.
--
-- job_ended_update_time_idx finds the ended jobs to purge, oldest end first,
-- without reading a live row. job_live_idx replaces job_live_id_idx (restore:
-- live jobs in id order) and also carries the topic and the state, so that
-- /stats counts the live jobs from this index alone.
ALTER TABLE job
    DROP INDEX job_live_id_idx,
    ADD INDEX job_live_idx (is_live, id, topic, status),
    ADD INDEX job_ended_update_time_idx (is_live, update_time);

-- How many jobs of each topic are in each ended state. A row whose count fell
-- to 0 is removed by the purge.
CREATE TABLE job_ended_count (
    topic  VARCHAR(128) NOT NULL,
    status VARCHAR(16)  NOT NULL,            -- finished deleted dead expired
    jobs   BIGINT       NOT NULL,
    PRIMARY KEY (topic, status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO job_ended_count (topic, status, jobs)
    SELECT topic, status, COUNT(*) FROM job WHERE is_live = 0 GROUP BY topic, status;
