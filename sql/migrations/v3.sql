-- Schema version 3: dead events out of the claims' way.
-- Dead events stay in the log until purged. The claim index was
-- (SUB_ID, EVENT_ID), so a claim walked past every dead event of its
-- subscription and read each row to test DEAD_AT; DEAD_AT itself cannot be
-- the second segment, as the engine does not bound an index scan by
-- "IS NULL" on a later segment. DEAD is the same fact as "DEAD_AT IS NOT
-- NULL", in a form the index can be bounded by: (SUB_ID, DEAD = FALSE) is one
-- contiguous range in EVENT_ID order. The statements that set DEAD_AT (fail,
-- retry) set DEAD with it; a check constraint would cost every logged event
-- a trigger call on the writer's side.

-- name: before/add_dead
EXECUTE BLOCK AS
BEGIN
    IF (NOT EXISTS (SELECT 1 FROM RDB$RELATION_FIELDS
                    WHERE RDB$RELATION_NAME = 'EVENT_LOG' AND RDB$FIELD_NAME = 'DEAD')) THEN
        EXECUTE STATEMENT 'ALTER TABLE EVENT_LOG ADD DEAD BOOLEAN DEFAULT FALSE NOT NULL';
END;

-- name: backfill_dead
UPDATE EVENT_LOG SET DEAD = (DEAD_AT IS NOT NULL);

-- name: drop_queue_index
DROP INDEX IX_EVENT_LOG_QUEUE;

-- name: create_queue_index
CREATE INDEX IX_EVENT_LOG_QUEUE ON EVENT_LOG (SUB_ID, DEAD, EVENT_ID);

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 3;
END;
