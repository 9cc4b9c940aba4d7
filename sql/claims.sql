-- Claiming events. A claim sets CLAIMED_BY and a lease (CLAIM_EXPIRES_AT) and
-- counts the attempt; a claim whose lease ran out (crashed worker) is
-- claimable again. {sub_ids} is a list of integer subscription ids;
-- {key_order} is empty or the block key_order below. A claim returns what
-- handlers get of each event it claimed (the blocks claimed_columns,
-- claimed_outputs and claimed_variables, filled in by claims.py), so a
-- batch takes one statement.

-- name: claimed_columns
-- Values of up to 8,000 characters come as VARCHAR, longer ones as BLOB:
-- reading a BLOB takes several client calls per value, which with quick
-- handlers cost more than the claim itself.
EVENT_ID, SUB_ID, PK_KEY,
IIF(CHAR_LENGTH(OLD_VALUES) <= 8000, CAST(OLD_VALUES AS VARCHAR(8000) CHARACTER SET UTF8), NULL),
IIF(CHAR_LENGTH(OLD_VALUES) > 8000, OLD_VALUES, NULL),
IIF(CHAR_LENGTH(NEW_VALUES) <= 8000, CAST(NEW_VALUES AS VARCHAR(8000) CHARACTER SET UTF8), NULL),
IIF(CHAR_LENGTH(NEW_VALUES) > 8000, NEW_VALUES, NULL),
CREATED_AT, ATTEMPTS

-- name: claimed_outputs
-- claimed_columns as the output parameters of a PSQL block.
EVENT_ID BIGINT, SUB_ID INTEGER, PK_KEY VARCHAR(4000) CHARACTER SET UTF8,
OLD_TEXT VARCHAR(8000) CHARACTER SET UTF8, OLD_BLOB BLOB SUB_TYPE TEXT CHARACTER SET UTF8,
NEW_TEXT VARCHAR(8000) CHARACTER SET UTF8, NEW_BLOB BLOB SUB_TYPE TEXT CHARACTER SET UTF8,
CREATED_AT TIMESTAMP, ATTEMPTS INTEGER

-- name: claimed_variables
:EVENT_ID, :SUB_ID, :PK_KEY, :OLD_TEXT, :OLD_BLOB, :NEW_TEXT, :NEW_BLOB, :CREATED_AT, :ATTEMPTS

-- name: key_order
-- --key-order: an event waits while an earlier event of its group (table, tag,
-- primary key) is still in the log, pending, claimed or failing; dead ones
-- no longer hold it back.
AND NOT EXISTS (SELECT 1 FROM EVENT_LOG EARLIER
                WHERE EARLIER.KEY_HASH = E.KEY_HASH
                  AND EARLIER.EVENT_ID < E.EVENT_ID
                  AND EARLIER.DEAD = FALSE)

-- name: claim_skip_locked
-- Firebird 5: rows locked by another claimer's open transaction are skipped.
UPDATE EVENT_LOG E
SET CLAIMED_BY = ?,
    CLAIM_EXPIRES_AT = DATEADD(? MILLISECOND TO LOCALTIMESTAMP),
    ATTEMPTS = ATTEMPTS + 1
WHERE SUB_ID IN ({sub_ids})
  AND DEAD = FALSE
  AND (NEXT_ATTEMPT_AT IS NULL OR NEXT_ATTEMPT_AT <= LOCALTIMESTAMP)
  AND (CLAIM_EXPIRES_AT IS NULL OR CLAIM_EXPIRES_AT <= LOCALTIMESTAMP)
  {key_order}
ORDER BY EVENT_ID
ROWS ?
SKIP LOCKED
RETURNING {claimed_columns};

-- name: claim_fallback
-- Firebird 3/4 (no SKIP LOCKED): try each candidate in a NO WAIT transaction
-- and pass over the ones another claimer holds, catching the conflict per
-- row, so claimers never see a lock conflict.
EXECUTE BLOCK (OWNER VARCHAR(100) CHARACTER SET UTF8 = ?, LEASE_MS INTEGER = ?, MAX_ROWS INTEGER = ?)
RETURNS ({claimed_outputs})
AS
DECLARE CANDIDATE BIGINT;
DECLARE CLAIMED INTEGER = 0;
BEGIN
    FOR SELECT EVENT_ID FROM EVENT_LOG E
        WHERE SUB_ID IN ({sub_ids})
          AND DEAD = FALSE
          AND (NEXT_ATTEMPT_AT IS NULL OR NEXT_ATTEMPT_AT <= LOCALTIMESTAMP)
          AND (CLAIM_EXPIRES_AT IS NULL OR CLAIM_EXPIRES_AT <= LOCALTIMESTAMP)
          {key_order}
        ORDER BY EVENT_ID
        INTO :CANDIDATE
    DO
    BEGIN
        EVENT_ID = NULL;
        BEGIN
            UPDATE EVENT_LOG
            SET CLAIMED_BY = :OWNER,
                CLAIM_EXPIRES_AT = DATEADD(:LEASE_MS MILLISECOND TO LOCALTIMESTAMP),
                ATTEMPTS = ATTEMPTS + 1
            WHERE EVENT_ID = :CANDIDATE
              AND DEAD = FALSE
              AND (CLAIM_EXPIRES_AT IS NULL OR CLAIM_EXPIRES_AT <= LOCALTIMESTAMP)
            RETURNING {claimed_columns}
            INTO {claimed_variables};
            WHEN GDSCODE LOCK_CONFLICT, GDSCODE UPDATE_CONFLICT, GDSCODE DEADLOCK DO
                EVENT_ID = NULL;
        END
        IF (EVENT_ID IS NOT NULL) THEN
        BEGIN
            SUSPEND;
            CLAIMED = CLAIMED + 1;
            IF (CLAIMED >= MAX_ROWS) THEN LEAVE;
        END
    END
END;

-- name: claim_head
-- Ordered mode: claim the first events of one subscription, stopping at the
-- first one that is not available (held by another consumer, or waiting for
-- its retry), so nothing is ever handled before an earlier event.
EXECUTE BLOCK (OWNER VARCHAR(100) CHARACTER SET UTF8 = ?, LEASE_MS INTEGER = ?, MAX_ROWS INTEGER = ?,
               THE_SUB INTEGER = ?)
RETURNS ({claimed_outputs})
AS
DECLARE CANDIDATE BIGINT;
DECLARE AVAILABLE BOOLEAN;
BEGIN
    FOR SELECT FIRST (:MAX_ROWS) EVENT_ID,
               (NEXT_ATTEMPT_AT IS NULL OR NEXT_ATTEMPT_AT <= LOCALTIMESTAMP)
               AND (CLAIM_EXPIRES_AT IS NULL OR CLAIM_EXPIRES_AT <= LOCALTIMESTAMP)
        FROM EVENT_LOG
        WHERE SUB_ID = :THE_SUB AND DEAD = FALSE
        ORDER BY EVENT_ID
        INTO :CANDIDATE, :AVAILABLE
    DO
    BEGIN
        IF (AVAILABLE IS NOT TRUE) THEN LEAVE;
        EVENT_ID = NULL;
        BEGIN
            UPDATE EVENT_LOG
            SET CLAIMED_BY = :OWNER,
                CLAIM_EXPIRES_AT = DATEADD(:LEASE_MS MILLISECOND TO LOCALTIMESTAMP),
                ATTEMPTS = ATTEMPTS + 1
            WHERE EVENT_ID = :CANDIDATE
              AND (CLAIM_EXPIRES_AT IS NULL OR CLAIM_EXPIRES_AT <= LOCALTIMESTAMP)
            RETURNING {claimed_columns}
            INTO {claimed_variables};
            WHEN GDSCODE LOCK_CONFLICT, GDSCODE UPDATE_CONFLICT, GDSCODE DEADLOCK DO
                EVENT_ID = NULL;
        END
        IF (EVENT_ID IS NULL) THEN LEAVE;
        SUSPEND;
    END
END;

-- ack, release and extend act on a batch: event_ids is a list of integer
-- event ids, and only rows this owner still holds are touched.

-- name: ack
DELETE FROM EVENT_LOG WHERE EVENT_ID IN ({event_ids}) AND CLAIMED_BY = ?;

-- name: fail
-- DEAD and DEAD_AT are set when the attempt was the last one allowed.
UPDATE EVENT_LOG
SET CLAIMED_BY = NULL,
    CLAIM_EXPIRES_AT = NULL,
    LAST_ERROR = ?,
    NEXT_ATTEMPT_AT = DATEADD(? MILLISECOND TO LOCALTIMESTAMP),
    DEAD_AT = IIF(? = 1, LOCALTIMESTAMP, NULL),
    DEAD = (? = 1)
WHERE EVENT_ID = ? AND CLAIMED_BY = ?;

-- name: release
-- Give back a claimed event that was never started: the attempt did not happen.
UPDATE EVENT_LOG
SET CLAIMED_BY = NULL, CLAIM_EXPIRES_AT = NULL, ATTEMPTS = ATTEMPTS - 1
WHERE EVENT_ID IN ({event_ids}) AND CLAIMED_BY = ?;

-- name: extend
UPDATE EVENT_LOG
SET CLAIM_EXPIRES_AT = DATEADD(? MILLISECOND TO LOCALTIMESTAMP)
WHERE EVENT_ID IN ({event_ids}) AND CLAIMED_BY = ?;

-- name: subscriptions
SELECT SUB_ID, TRIM(TABLE_NAME), ACTION, TRIM(TAG) FROM EVENT_SUBSCRIBER ORDER BY SUB_ID;

-- name: delete_orphans
-- Events whose subscription was purged while a writer's transaction that
-- logged them was still running.
DELETE FROM EVENT_LOG WHERE SUB_ID NOT IN (SELECT SUB_ID FROM EVENT_SUBSCRIBER);
