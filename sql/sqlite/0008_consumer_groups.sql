-- Consumer groups. A topic may declare groups; when one of its jobs falls due,
-- the queue writes one delivery per group, an ordinary job row whose id is
-- `<job id>/<group>` and whose topic is `<topic>/<group>` (the '/' is outside
-- the names' charset, so no client name takes that form). Ids and topics are
-- TEXT with no length check, so they hold those names as they are.
--
-- job_groups holds the groups a push restricted its job to, comma-separated
-- (no name holds a comma); NULL when it named none, which means every group
-- of the topic.
ALTER TABLE job ADD COLUMN job_groups TEXT;

-- The groups declared on each topic. Kept in the store, like topic_pause, so
-- that a declaration outlives restarts.
CREATE TABLE topic_group (
    topic       TEXT    NOT NULL,
    group_name  TEXT    NOT NULL,         -- `group` is a reserved word
    declared_at INTEGER NOT NULL,         -- epoch ms of the first declaration
    PRIMARY KEY (topic, group_name)
) STRICT, WITHOUT ROWID;
