-- delayq durable store, SQLite dialect. Applied at start by `sqlx::migrate!`.
--
-- `job` holds the current row of every job, `job_log` one row per transition.
-- Column names follow mykit-delay (id, bizkey, topic, subtopic, delay,
-- create_time, body, status, ttl, update_time; log: id, job_id, status, node,
-- update_time, host) plus what delayq needs. Times are INTEGER epoch ms,
-- durations INTEGER ms, `status` the lowercase state name.
--
-- Live states are delay, ready and reserved; every other state is terminal
-- (a new job may reuse the id). The same literal list appears in the queries,
-- so that SQLite can use the partial indexes below.
--
-- MySQL / MariaDB mirror: the same columns (VARCHAR(128) with a binary
-- collation for id / topic / bizkey, BIGINT times, MEDIUMTEXT body); MariaDB has
-- no partial indexes, so the live-only unique key there is a UNIQUE index on
-- (topic, live_bizkey) where live_bizkey is a virtual column equal to bizkey
-- while the job is live and NULL otherwise, and the restore index is (status, id).

CREATE TABLE job (
    id            TEXT    NOT NULL PRIMARY KEY,
    bizkey        TEXT,
    topic         TEXT    NOT NULL,
    subtopic      TEXT,
    delay         INTEGER NOT NULL,            -- ms the client asked for
    create_time   INTEGER NOT NULL,            -- epoch ms
    body          TEXT    NOT NULL,
    status        TEXT    NOT NULL,            -- delay ready reserved finished deleted dead expired
    ttl           INTEGER NOT NULL DEFAULT 0,  -- ms, 0 = never
    update_time   INTEGER NOT NULL,            -- epoch ms of the last state change
    run_at        INTEGER NOT NULL,            -- epoch ms the job is (or was) due
    ttr           INTEGER NOT NULL,            -- ms
    priority      INTEGER NOT NULL,            -- 0 (most urgent) to 4
    attempt       INTEGER NOT NULL,            -- current (or next) delivery, from 1
    max_retries   INTEGER NOT NULL,
    retry_backoff TEXT    NOT NULL DEFAULT '[]', -- JSON array of ms
    result        TEXT                         -- what the consumer reported
) STRICT;

-- Restore: live jobs in id order.
CREATE INDEX job_live_id_idx ON job (id)
    WHERE status IN ('delay', 'ready', 'reserved');

-- A business key names at most one live job per topic; ended jobs do not block it.
CREATE UNIQUE INDEX job_live_bizkey_uq ON job (topic, bizkey)
    WHERE status IN ('delay', 'ready', 'reserved') AND bizkey IS NOT NULL;

-- Listing a topic's jobs in a state, oldest due first; also serves the counts.
CREATE INDEX job_topic_status_run_at_idx ON job (topic, status, run_at, id);

CREATE TABLE job_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    node        TEXT    NOT NULL,              -- the delayq node that recorded it
    update_time INTEGER NOT NULL,              -- epoch ms of the transition
    host        TEXT    NOT NULL
) STRICT;

-- A job's history, oldest first.
CREATE INDEX job_log_job_id_idx ON job_log (job_id, id);
