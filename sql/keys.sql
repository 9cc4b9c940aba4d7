-- Finding a row's events by its key (the console's key filter): the key's
-- typed values are captured the way the table's trigger captures them, so
-- the result is the bytes in EVENT_LOG.PK_ROW, and KEY_HASH (the trigger's
-- HASH of '<table>|<tag>|' and those bytes) leads to them through an index.

-- name: insert_key
-- The expression the trigger captures an insert's key with, over NEW.
SELECT REASON, INSERT_KEY FROM EVENT_CAPTURE_SOURCE(?);

-- name: key_block
-- Filled in by capture/keys.py: {inputs} with one "Kn VARCHAR(8191)
-- CHARACTER SET UTF8 = ?" per key column, {casts} with "CAST(:Kn AS TYPE OF
-- COLUMN <table>.<column>) AS <column>" (quoted identifiers), {insert_key}
-- with insert_key's expression. A value that is not of its column's type
-- fails the cast.
EXECUTE BLOCK ({inputs})
RETURNS (ROW_KEY VARCHAR(1000) CHARACTER SET OCTETS)
AS
BEGIN
    FOR SELECT {casts} FROM RDB$DATABASE AS CURSOR NEW
    DO
    BEGIN
        ROW_KEY = {insert_key};
        SUSPEND;
    END
END;

-- name: key_hash
SELECT HASH(CAST(? AS VARCHAR(2000) CHARACTER SET OCTETS)) FROM RDB$DATABASE;
