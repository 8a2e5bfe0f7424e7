-- Facts about the database itself, one row each. `store_id` is the identity
-- of the store: delayq nodes sharing a Redis prefix compare it to make sure
-- they share one database (docs/operations.md). The store writes the row on
-- open, insert-if-absent, so every process opening this file reads the same id.
CREATE TABLE store_meta (
    meta_key   TEXT NOT NULL PRIMARY KEY,
    meta_value TEXT NOT NULL
) STRICT, WITHOUT ROWID;
