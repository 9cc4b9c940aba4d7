-- Re-queueing dead events and purging old ones (`subs retry`, `subs purge`).

-- name: dead_by_id
SELECT COUNT(*) FROM EVENT_LOG WHERE EVENT_ID = ? AND DEAD_AT IS NOT NULL;

-- name: retry_id
UPDATE EVENT_LOG
SET DEAD = FALSE, DEAD_AT = NULL, ATTEMPTS = 0, NEXT_ATTEMPT_AT = NULL, LAST_ERROR = NULL
WHERE EVENT_ID = ? AND DEAD_AT IS NOT NULL;

-- name: retry_dead
-- The dead events of the subscriptions with tag ? (of every subscription
-- when it is NULL). Subscription by subscription, so that each UPDATE walks
-- its dead events on the claim index: a condition on the tag alone, or
-- none, reads the whole log. Every dead event has its subscription: removing
-- one with --purge deletes its events, and an event logged after that is
-- never claimed, so never dead.
EXECUTE BLOCK (TAG VARCHAR(40) CHARACTER SET ASCII = ?) RETURNS (RETRIED INTEGER)
AS
DECLARE SUB INTEGER;
BEGIN
    RETRIED = 0;
    FOR SELECT SUB_ID FROM EVENT_SUBSCRIBER WHERE :TAG IS NULL OR TAG = :TAG INTO SUB DO
    BEGIN
        UPDATE EVENT_LOG
        SET DEAD = FALSE, DEAD_AT = NULL, ATTEMPTS = 0, NEXT_ATTEMPT_AT = NULL, LAST_ERROR = NULL
        WHERE SUB_ID = :SUB AND DEAD = TRUE;
        RETRIED = RETRIED + ROW_COUNT;
    END
    SUSPEND;
END

-- name: tags
-- Every subscription's tag, and whether it is active: a retry wakes the
-- listeners of the active ones.
SELECT DISTINCT TRIM(TAG), ACTIVE FROM EVENT_SUBSCRIBER;

-- name: purge_dead
-- Dead events that died ? milliseconds ago or earlier, subscription by
-- subscription on the claim index, as retry_dead.
EXECUTE BLOCK (AGE_MS BIGINT = ?) RETURNS (PURGED INTEGER)
AS
DECLARE SUB INTEGER;
DECLARE DIED_BY TIMESTAMP;
BEGIN
    PURGED = 0;
    DIED_BY = DATEADD(-:AGE_MS MILLISECOND TO LOCALTIMESTAMP);
    FOR SELECT SUB_ID FROM EVENT_SUBSCRIBER INTO SUB DO
    BEGIN
        DELETE FROM EVENT_LOG WHERE SUB_ID = :SUB AND DEAD = TRUE AND DEAD_AT <= :DIED_BY;
        PURGED = PURGED + ROW_COUNT;
    END
    SUSPEND;
END

-- name: purge_removed_subscriptions
DELETE FROM EVENT_SUBSCRIBER s
WHERE s.ACTIVE = FALSE AND NOT EXISTS (SELECT 1 FROM EVENT_LOG l WHERE l.SUB_ID = s.SUB_ID);

-- name: purge_orphan_leases
DELETE FROM EVENT_LEASE WHERE SUB_ID NOT IN (SELECT SUB_ID FROM EVENT_SUBSCRIBER);

-- name: purge_orphan_spans
DELETE FROM EVENT_SPAN WHERE SUB_ID NOT IN (SELECT SUB_ID FROM EVENT_SUBSCRIBER);
