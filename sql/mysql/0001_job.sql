-- delayq durable store, MySQL / MariaDB dialect (MariaDB 10.11, MySQL 8).
-- Applied at start by `sqlx::migrate!`.
--
-- The same tables and semantics as sql/sqlite: `job` holds the current row of
-- every job, `job_log` one row per transition. Column names follow mykit-delay
-- (job: id, bizkey, topic, subtopic, delay, create_time, body, status, ttl,
-- update_time; log: id, job_id, status, node, update_time, host) plus what
-- delayq needs. Times are BIGINT epoch ms, durations BIGINT ms, `status` the
-- lowercase state name.
--
-- Live states are delay, ready and reserved; every other state is terminal (a
-- new job may reuse the id). MariaDB has no partial indexes, so liveness is
-- materialised in two generated columns:
--   is_live      1 while the job is live, 0 once it has ended;
--   live_bizkey  the bizkey while the job is live, NULL once it has ended.
-- The UNIQUE index on (topic, live_bizkey) makes a business key unique among
-- live jobs only (NULLs never collide). The generated columns list the live states;
-- a unit test of crates/delayq-store/src/mysql/rows.rs checks them against the code.
--
-- Text is utf8mb4 with a binary collation: ids, topics and keys compare and
-- sort byte by byte, as in SQLite. Bodies and results are MEDIUMTEXT (16 MiB).

CREATE TABLE job (
    id            VARCHAR(128)  NOT NULL,
    bizkey        VARCHAR(128)  NULL,
    topic         VARCHAR(128)  NOT NULL,
    subtopic      VARCHAR(255)  NULL,
    delay         BIGINT        NOT NULL,            -- ms the client asked for
    create_time   BIGINT        NOT NULL,            -- epoch ms
    body          MEDIUMTEXT    NOT NULL,
    status        VARCHAR(16)   NOT NULL,            -- delay ready reserved finished deleted dead expired
    ttl           BIGINT        NOT NULL DEFAULT 0,  -- ms, 0 = never
    update_time   BIGINT        NOT NULL,            -- epoch ms of the last state change
    run_at        BIGINT        NOT NULL,            -- epoch ms the job is (or was) due
    ttr           BIGINT        NOT NULL,            -- ms
    priority      BIGINT        NOT NULL,            -- 0 (most urgent) to 4
    attempt       BIGINT        NOT NULL,            -- current (or next) delivery, from 1
    max_retries   BIGINT        NOT NULL,
    retry_backoff TEXT          NOT NULL,            -- JSON array of ms
    result        MEDIUMTEXT    NULL,                -- what the consumer reported
    is_live       TINYINT       AS (IF(status IN ('delay', 'ready', 'reserved'), 1, 0)) STORED,
    live_bizkey   VARCHAR(128)  AS (IF(status IN ('delay', 'ready', 'reserved'), bizkey, NULL)) STORED,
    PRIMARY KEY (id),
    -- A business key names at most one live job per topic; ended jobs do not block it.
    UNIQUE KEY job_live_bizkey_uq (topic, live_bizkey),
    -- Restore: live jobs in id order; also marks every live job deleted.
    KEY job_live_id_idx (is_live, id),
    -- Listing a topic's jobs in a state, oldest due first; also serves the counts.
    KEY job_topic_status_run_at_idx (topic, status, run_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE job_log (
    id          BIGINT        NOT NULL AUTO_INCREMENT,
    job_id      VARCHAR(128)  NOT NULL,
    status      VARCHAR(16)   NOT NULL,
    attempt     BIGINT        NOT NULL,
    node        VARCHAR(255)  NOT NULL,              -- the delayq node that recorded it
    update_time BIGINT        NOT NULL,              -- epoch ms of the transition
    host        VARCHAR(255)  NOT NULL,
    PRIMARY KEY (id),
    -- A job's history, oldest first.
    KEY job_log_job_id_idx (job_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
