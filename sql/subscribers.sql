-- name: for_table
SELECT SUB_ID, TRIM(TRAILING FROM TABLE_NAME), ACTION, TRIM(TAG), WATCH_COLUMNS, WHEN_CONDITION, ACTIVE, PAUSED
FROM EVENT_SUBSCRIBER
WHERE TABLE_NAME = ?
ORDER BY SUB_ID;

-- name: table_names
SELECT DISTINCT TRIM(TRAILING FROM TABLE_NAME) FROM EVENT_SUBSCRIBER
WHERE TABLE_NAME = CAST(? AS VARCHAR(1000) CHARACTER SET UTF8);

-- name: subscribed_tables
SELECT DISTINCT TRIM(TRAILING FROM TABLE_NAME) FROM EVENT_SUBSCRIBER ORDER BY 1;

-- name: insert
INSERT INTO EVENT_SUBSCRIBER (TABLE_NAME, ACTION, TAG, WATCH_COLUMNS, WHEN_CONDITION)
VALUES (?, ?, ?, ?, ?)
RETURNING SUB_ID;

-- name: update
UPDATE EVENT_SUBSCRIBER
SET WATCH_COLUMNS = ?, WHEN_CONDITION = ?, ACTIVE = TRUE
WHERE SUB_ID = ?;

-- name: deactivate
UPDATE EVENT_SUBSCRIBER SET ACTIVE = FALSE WHERE SUB_ID = ?;

-- name: delete
DELETE FROM EVENT_SUBSCRIBER WHERE SUB_ID = ?;

-- name: delete_lease
DELETE FROM EVENT_LEASE WHERE SUB_ID = ?;

-- name: delete_spans
DELETE FROM EVENT_SPAN WHERE SUB_ID = ?;

-- name: hold_backfill
-- First in `subs remove` of an insert subscription: a running backfill's
-- chunk, which updates this row as it commits, then waits for the remove
-- and stops (backfill.sql, chunk_done), so the remove counts or purges
-- every event it logged.
UPDATE EVENT_BACKFILL SET UPDATED_AT = UPDATED_AT WHERE SUB_ID = ?;

-- name: delete_backfill
DELETE FROM EVENT_BACKFILL WHERE SUB_ID = ?;

-- name: count_events
SELECT COUNT(*) FROM EVENT_LOG WHERE SUB_ID = ?;

-- name: delete_events
DELETE FROM EVENT_LOG WHERE SUB_ID = ?;

-- name: sync_trigger
-- The capture trigger's generator lives in the database (sql/capture.sql).
SELECT TRIGGER_NAME, REASON FROM EVENT_CAPTURE_SYNC(?);

-- name: drop_trigger
DROP TRIGGER {trigger};

-- name: grant_select_to_trigger
-- The rights a capture trigger's --when conditions need (metadata.sql,
-- capture_trigger_rights): see capture/trigger_sync.grant_condition_rights.
GRANT SELECT ON {object} TO TRIGGER {trigger};

-- name: grant_procedure_to_trigger
GRANT EXECUTE ON PROCEDURE {object} TO TRIGGER {trigger};

-- name: grant_function_to_trigger
GRANT EXECUTE ON FUNCTION {object} TO TRIGGER {trigger};

-- name: grant_package_to_trigger
GRANT EXECUTE ON PACKAGE {object} TO TRIGGER {trigger};

-- name: remembered_rights
-- What the table's capture trigger was last found to need (EVENT_CAPTURE_RIGHT).
SELECT TRIM(TRAILING FROM OBJECT_NAME), TRIM(OBJECT_KIND) FROM EVENT_CAPTURE_RIGHT WHERE TABLE_NAME = ?;

-- name: forget_rights
DELETE FROM EVENT_CAPTURE_RIGHT WHERE TABLE_NAME = ?;

-- name: remember_right
INSERT INTO EVENT_CAPTURE_RIGHT (TABLE_NAME, OBJECT_NAME, OBJECT_KIND) VALUES (?, ?, ?);

-- name: touch_trigger
-- A metadata change that changes nothing, made after the real change has
-- committed: see capture/trigger_sync.settle_trigger.
ALTER TRIGGER {trigger} POSITION 32000;

-- name: set_paused
UPDATE EVENT_SUBSCRIBER SET PAUSED = ? WHERE SUB_ID = ?;

-- name: by_id
SELECT SUB_ID, TRIM(TRAILING FROM TABLE_NAME), ACTION, TRIM(TAG), WATCH_COLUMNS, WHEN_CONDITION, ACTIVE, PAUSED
FROM EVENT_SUBSCRIBER
WHERE SUB_ID = ?;

-- name: post
-- Posts the event named by the parameter when the transaction commits.
EXECUTE BLOCK (EVENT_NAME VARCHAR(45) CHARACTER SET ASCII = ?)
AS
BEGIN
    POST_EVENT EVENT_NAME;
END;

-- name: list
SELECT s.SUB_ID, TRIM(TRAILING FROM s.TABLE_NAME), s.ACTION, TRIM(s.TAG), s.WATCH_COLUMNS, s.WHEN_CONDITION,
       s.ACTIVE, s.CREATED_AT,
       (SELECT COUNT(*) FROM EVENT_LOG l WHERE l.SUB_ID = s.SUB_ID AND l.DEAD_AT IS NULL),
       (SELECT COUNT(*) FROM EVENT_LOG l WHERE l.SUB_ID = s.SUB_ID AND l.DEAD_AT IS NOT NULL),
       s.PAUSED
FROM EVENT_SUBSCRIBER s
ORDER BY s.TABLE_NAME, s.SUB_ID;
