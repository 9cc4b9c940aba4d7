-- Schema version 5: a narrower EVENT_LOG record.
-- The engine builds, compresses and copies every record at its declared
-- width, not the width of what it holds. An EVENT_LOG row was about 25 KB
-- wide: PK_KEY VARCHAR(4000) UTF8 took 16 KB of it and LAST_ERROR
-- VARCHAR(2000) UTF8 8 KB. Logging an event cost the writer's trigger about
-- 42 µs; with these two narrowed, 26 µs (a PSQL bulk insert into a table
-- with one subscription, embedded Firebird 5). PK_KEY becomes VARCHAR(1000)
-- (`subs add` refuses keys that can be longer; Firebird's own index key limit
-- keeps UTF8 keys under about 500 characters on 8 KB pages) and LAST_ERROR a
-- BLOB, 8 bytes in the record while NULL: an event only gets an error when it
-- fails.
--
-- Firebird changes neither in place: each value is copied into a new column,
-- which then takes the old one's name. The new columns come first, each in a
-- transaction of its own, skipped when a concurrent `subs init` added them or
-- already finished; the rest runs in one transaction, with the triggers
-- (which name PK_KEY) emptied before and regenerated after (schema.py).

-- name: add_key_text
EXECUTE BLOCK AS
BEGIN
    IF (NOT EXISTS (SELECT 1 FROM RDB$RELATION_FIELDS
                    WHERE RDB$RELATION_NAME = 'EVENT_LOG' AND RDB$FIELD_NAME = 'PK_KEY_TEXT')
        AND EXISTS (SELECT 1 FROM RDB$RELATION_FIELDS RF
                    JOIN RDB$FIELDS F ON F.RDB$FIELD_NAME = RF.RDB$FIELD_SOURCE
                    WHERE RF.RDB$RELATION_NAME = 'EVENT_LOG' AND RF.RDB$FIELD_NAME = 'PK_KEY'
                      AND F.RDB$CHARACTER_LENGTH = 4000)) THEN
        EXECUTE STATEMENT 'ALTER TABLE EVENT_LOG ADD PK_KEY_TEXT VARCHAR(1000) CHARACTER SET UTF8';
END;

-- name: add_error_text
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

-- name: copy_values
UPDATE EVENT_LOG SET PK_KEY_TEXT = PK_KEY, LAST_ERROR_TEXT = LAST_ERROR;

-- name: drop_key
ALTER TABLE EVENT_LOG DROP PK_KEY;

-- name: rename_key
ALTER TABLE EVENT_LOG ALTER COLUMN PK_KEY_TEXT TO PK_KEY;

-- name: key_not_null
ALTER TABLE EVENT_LOG ALTER PK_KEY SET NOT NULL;

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
