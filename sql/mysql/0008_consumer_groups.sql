-- Consumer groups. A topic may declare groups; when one of its jobs falls due,
-- the queue writes one delivery per group, an ordinary job row whose id is
-- `<job id>/<group>` and whose topic is `<topic>/<group>` (the '/' is outside
-- the names' charset, so no client name takes that form). Ids and topics widen
-- to hold a name, the mark and a group name: 128 + 1 + 128 characters. Every
-- key over them stays below InnoDB's 3072 bytes in utf8mb4 (4 bytes a
-- character): the widest, job_topic_status_id_idx and job_live_idx, each hold
-- one id and one topic (2 x 1028 bytes) and a few small columns.
--
-- job_groups holds the groups a push restricted its job to, comma-separated
-- (no name holds a comma); NULL when it named none, which means every group
-- of the topic. TEXT, so that it stays off the row's 65535-byte limit.
ALTER TABLE job
    MODIFY COLUMN id VARCHAR(257) NOT NULL,
    MODIFY COLUMN topic VARCHAR(257) NOT NULL,
    ADD COLUMN job_groups TEXT NULL;

ALTER TABLE job_log MODIFY COLUMN job_id VARCHAR(257) NOT NULL;

-- The writer counts ended deliveries under their own topics.
ALTER TABLE job_ended_count MODIFY COLUMN topic VARCHAR(257) NOT NULL;

-- The groups declared on each topic. Kept in the store, like topic_pause, so
-- that a declaration outlives restarts and leader changes.
CREATE TABLE topic_group (
    topic       VARCHAR(128) NOT NULL,
    group_name  VARCHAR(128) NOT NULL,   -- `group` is a reserved word
    declared_at BIGINT       NOT NULL,   -- epoch ms of the first declaration
    PRIMARY KEY (topic, group_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
