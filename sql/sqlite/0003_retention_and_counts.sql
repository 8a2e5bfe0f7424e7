-- Retention of ended jobs, and /stats counts whose cost does not grow with them.
--
-- Ended jobs are purged once they have been ended longer than the retention
-- (`store.retention_ms`). This index finds them, oldest end first, without
-- reading a live row; it holds ended rows only.
CREATE INDEX job_ended_update_time_idx ON job (update_time)
    WHERE status NOT IN ('delay', 'ready', 'reserved');

-- The restore index (live jobs in id order) also carries the topic and the
-- state, so that /stats counts the live jobs from this index alone: its cost
-- follows the live jobs. Its entries change with the state as before (the
-- state is in its WHERE clause).
DROP INDEX job_live_id_idx;
CREATE INDEX job_live_idx ON job (id, topic, status)
    WHERE status IN ('delay', 'ready', 'reserved');

-- How many jobs of each topic are in each ended state. The triggers below keep
-- it in the transaction that writes the job row (a job that ends, an ended id
-- pushed again, a purged job), so /stats reads the ended counts here instead
-- of counting ended rows. A row whose count fell to 0 is removed by the purge.
CREATE TABLE job_ended_count (
    topic  TEXT    NOT NULL,
    status TEXT    NOT NULL,              -- finished deleted dead expired
    jobs   INTEGER NOT NULL,
    PRIMARY KEY (topic, status)
) STRICT, WITHOUT ROWID;

INSERT INTO job_ended_count (topic, status, jobs)
    SELECT topic, status, COUNT(*) FROM job
    WHERE status NOT IN ('delay', 'ready', 'reserved')
    GROUP BY topic, status;

CREATE TRIGGER job_ended_count_inserted AFTER INSERT ON job
    WHEN NEW.status NOT IN ('delay', 'ready', 'reserved')
BEGIN
    INSERT INTO job_ended_count (topic, status, jobs) VALUES (NEW.topic, NEW.status, 1)
        ON CONFLICT (topic, status) DO UPDATE SET jobs = jobs + 1;
END;

CREATE TRIGGER job_ended_count_left AFTER UPDATE OF topic, status ON job
    WHEN OLD.status NOT IN ('delay', 'ready', 'reserved')
        AND (OLD.status <> NEW.status OR OLD.topic <> NEW.topic)
BEGIN
    UPDATE job_ended_count SET jobs = jobs - 1 WHERE topic = OLD.topic AND status = OLD.status;
END;

CREATE TRIGGER job_ended_count_entered AFTER UPDATE OF topic, status ON job
    WHEN NEW.status NOT IN ('delay', 'ready', 'reserved')
        AND (OLD.status <> NEW.status OR OLD.topic <> NEW.topic)
BEGIN
    INSERT INTO job_ended_count (topic, status, jobs) VALUES (NEW.topic, NEW.status, 1)
        ON CONFLICT (topic, status) DO UPDATE SET jobs = jobs + 1;
END;

CREATE TRIGGER job_ended_count_deleted AFTER DELETE ON job
    WHEN OLD.status NOT IN ('delay', 'ready', 'reserved')
BEGIN
    UPDATE job_ended_count SET jobs = jobs - 1 WHERE topic = OLD.topic AND status = OLD.status;
END;
