-- The topics an operator paused: their jobs still fall due, but no pop,
-- Subscribe stream or forwarder takes them until the topic is resumed. Kept
-- in the store so a pause outlives restarts.
CREATE TABLE topic_pause (
    topic     TEXT    NOT NULL PRIMARY KEY,
    paused_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
