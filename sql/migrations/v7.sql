-- Schema version 7: PK_KEY goes (step 2 of 2, see v6.sql).
-- Runs once no transaction older than it is still open: events triggers of
-- earlier versions logged in such a transaction would otherwise commit with
-- their key in a column that no longer exists.

-- name: wait/older_transactions
-- The oldest transaction still open, this one, and whether any trigger can
-- have logged the old way at all (none without an active subscription).
SELECT MON$OLDEST_ACTIVE, CURRENT_TRANSACTION,
       (SELECT COUNT(*) FROM EVENT_SUBSCRIBER WHERE ACTIVE)
FROM MON$DATABASE;

-- name: copy_row_key
UPDATE EVENT_LOG SET ROW_KEY = PK_KEY WHERE ROW_KEY IS NULL;

-- name: drop_pk_key
ALTER TABLE EVENT_LOG DROP PK_KEY;

-- name: row_key_not_null
ALTER TABLE EVENT_LOG ALTER ROW_KEY SET NOT NULL;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 7;
END;
