-- Facts about the database itself, one row each. `store_id` is the identity
-- of the store: delayq nodes sharing a Redis prefix compare it to make sure
-- they share this database (docs/operations.md). The store writes the row on
-- open, insert-if-absent, so every node on the database reads the same id.
CREATE TABLE store_meta (
    meta_key   VARCHAR(64)  NOT NULL,
    meta_value VARCHAR(255) NOT NULL,
    PRIMARY KEY (meta_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
