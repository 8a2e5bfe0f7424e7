-- The topics an operator paused: their jobs still fall due, but no pop,
-- Subscribe stream or forwarder takes them until the topic is resumed. Kept
-- in the store so a pause outlives restarts and leader changes.
CREATE TABLE topic_pause (
    topic     VARCHAR(128) NOT NULL,
    paused_at BIGINT       NOT NULL,
    PRIMARY KEY (topic)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
