-- Schema version 5: LAST_ERROR becomes a BLOB.
-- The engine builds, compresses and copies every record at its declared
-- width, not the width of what it holds: an EVENT_LOG row was about 25 KB
-- wide, 8 KB of it LAST_ERROR VARCHAR(2000) UTF8, which only failed events
-- use. A BLOB is 8 bytes in the record while NULL. Logging an event cost the
-- writer's trigger about 42 µs, 35 µs after this (a PSQL bulk insert into a
-- table with one subscription, embedded Firebird 5). Firebird cannot change a
-- VARCHAR into a BLOB in place: the text is copied into a new column, which
-- then takes the old one's name. No trigger names LAST_ERROR, so writers
-- keep working through the upgrade (tests/test_concurrency.py).

-- name: before/add_error_text
-- Skipped when a concurrent `subs init` already added it, or already finished
-- (LAST_ERROR is a BLOB then).
EXECUTE BLOCK AS
BEGIN
    IF (NOT EXISTS (SELECT 1 FROM RDB$RELATION_FIELDS
                    WHERE RDB$RELATION_NAME = 'EVENT_LOG' AND RDB$FIELD_NAME = 'LAST_ERROR_TEXT')
        AND NOT EXISTS (SELECT 1 FROM RDB$RELATION_FIELDS RF
                        JOIN RDB$FIELDS F ON F.RDB$FIELD_NAME = RF.RDB$FIELD_SOURCE
                        WHERE RF.RDB$RELATION_NAME = 'EVENT_LOG' AND RF.RDB$FIELD_NAME = 'LAST_ERROR'
                          AND F.RDB$FIELD_TYPE = 261)) THEN
        EXECUTE STATEMENT 'ALTER TABLE EVENT_LOG ADD LAST_ERROR_TEXT BLOB SUB_TYPE TEXT CHARACTER SET UTF8';
END;

-- name: copy_error
UPDATE EVENT_LOG SET LAST_ERROR_TEXT = LAST_ERROR WHERE LAST_ERROR IS NOT NULL;

-- name: drop_error
ALTER TABLE EVENT_LOG DROP LAST_ERROR;

-- name: rename_error
ALTER TABLE EVENT_LOG ALTER COLUMN LAST_ERROR_TEXT TO LAST_ERROR;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 5;
END;
