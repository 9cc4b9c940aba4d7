-- Schema version 9: keys and values captured before version 8 move to
-- PK_ROW, OLD_ROW and NEW_ROW, and ROW_KEY, OLD_VALUES and NEW_VALUES go
-- (step 2 of 2, see v8.sql).
-- Runs once no transaction older than it is still open: triggers of earlier
-- versions may have logged events in such a transaction.

-- name: wait/older_transactions
SELECT MON$OLDEST_ACTIVE, CURRENT_TRANSACTION,
       (SELECT COUNT(*) FROM EVENT_SUBSCRIBER WHERE ACTIVE)
FROM MON$DATABASE;

-- name: copy_values
-- Text rows keep their bytes: capture/values.py reads rows without the
-- leading '~' as the text format of versions up to 7.
UPDATE EVENT_LOG
SET PK_ROW = CAST(ROW_KEY AS VARCHAR(1000) CHARACTER SET OCTETS),
    OLD_ROW = CAST(OLD_VALUES AS BLOB SUB_TYPE BINARY),
    NEW_ROW = CAST(NEW_VALUES AS BLOB SUB_TYPE BINARY)
WHERE PK_ROW IS NULL;

-- name: pk_row_not_null
ALTER TABLE EVENT_LOG ALTER PK_ROW SET NOT NULL;

-- name: drop_text_columns
ALTER TABLE EVENT_LOG DROP ROW_KEY, DROP OLD_VALUES, DROP NEW_VALUES;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 9;
END;
