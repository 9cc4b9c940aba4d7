-- Schema version 2: a key hash on each event, for `subs listen --key-order`.
-- Firebird cannot use a column in the transaction that added it, so the
-- column and its index come first, each in a transaction of its own and
-- skipped when already there (an interrupted upgrade simply runs again); the
-- remaining blocks run in one transaction. Triggers of version 1 go on
-- logging without a key hash until `subs init` regenerates them, once every
-- migration has run.

-- name: before/add_key_hash
-- The ordering group of an event: its table, tag and primary key, hashed.
-- Two groups sharing a hash only lose some parallelism, never ordering.
EXECUTE BLOCK AS
BEGIN
    IF (NOT EXISTS (SELECT 1 FROM RDB$RELATION_FIELDS
                    WHERE RDB$RELATION_NAME = 'EVENT_LOG' AND RDB$FIELD_NAME = 'KEY_HASH')) THEN
        EXECUTE STATEMENT 'ALTER TABLE EVENT_LOG ADD KEY_HASH BIGINT';
END;

-- name: before/index_key_hash
-- Key-ordered claims ask "is there an earlier live event of this group?".
EXECUTE BLOCK AS
BEGIN
    IF (NOT EXISTS (SELECT 1 FROM RDB$INDICES WHERE RDB$INDEX_NAME = 'IX_EVENT_LOG_KEY')) THEN
        EXECUTE STATEMENT 'CREATE INDEX IX_EVENT_LOG_KEY ON EVENT_LOG (KEY_HASH, EVENT_ID)';
END;

-- name: backfill_key_hash
-- Events logged by version 1 triggers; matches the key hash the trigger generator writes.
UPDATE EVENT_LOG L
SET KEY_HASH = (SELECT HASH(S.TABLE_NAME || '|' || S.TAG || '|' || L.PK_KEY)
                FROM EVENT_SUBSCRIBER S WHERE S.SUB_ID = L.SUB_ID)
WHERE KEY_HASH IS NULL;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 2;
END;
