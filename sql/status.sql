-- name: status
-- Per subscription: live events (pending, failed ones waiting for a retry,
-- in flight), in flight (in a span a parallel worker holds, or in the batch
-- an ordered one has in hand, lease running), failed (not in flight, as the
-- console counts them: metrics.sql), dead, and the oldest live event's age
-- in ms. Counts read the subscription's stretch of the claim index, in
-- flight range by range (merged, so an event two ranges cover counts once):
-- testing each event against the spans took 6x as long on a backlog of
-- 1,000,000 events.
EXECUTE BLOCK
RETURNS (SUB_ID INTEGER, TABLE_NAME VARCHAR(63) CHARACTER SET UTF8, ACTION CHAR(1) CHARACTER SET ASCII,
         TAG VARCHAR(40) CHARACTER SET ASCII, ACTIVE BOOLEAN, PAUSED BOOLEAN,
         LIVE BIGINT, IN_FLIGHT BIGINT, FAILED BIGINT, DEAD BIGINT, OLDEST_MS BIGINT)
AS
DECLARE RANGE_FIRST BIGINT;
DECLARE RANGE_LAST BIGINT;
DECLARE COVERED_TO BIGINT;
DECLARE COUNTED BIGINT;
DECLARE FAILED_COUNTED BIGINT;
BEGIN
    FOR SELECT SUB_ID, TRIM(TRAILING FROM TABLE_NAME), ACTION, TRIM(TAG), ACTIVE, PAUSED
        FROM EVENT_SUBSCRIBER ORDER BY SUB_ID
        INTO :SUB_ID, :TABLE_NAME, :ACTION, :TAG, :ACTIVE, :PAUSED
    DO
    BEGIN
        SELECT COUNT(*), COALESCE(SUM(IIF(LAST_ERROR IS NULL, 0, 1)), 0),
               DATEDIFF(MILLISECOND FROM MIN(CREATED_AT) TO LOCALTIMESTAMP)
        FROM EVENT_LOG WHERE SUB_ID = :SUB_ID AND DEAD = FALSE
        INTO :LIVE, :FAILED, :OLDEST_MS;
        SELECT COUNT(*) FROM EVENT_LOG WHERE SUB_ID = :SUB_ID AND DEAD = TRUE INTO :DEAD;
        IN_FLIGHT = 0;
        COVERED_TO = NULL;
        FOR SELECT FIRST_EVENT, LAST_EVENT FROM EVENT_SPAN
            WHERE SUB_ID = :SUB_ID AND EXPIRES_AT > EVENT_NOW()
            UNION ALL
            SELECT FIRST_EVENT, LAST_EVENT FROM EVENT_LEASE
            WHERE SUB_ID = :SUB_ID AND HOLDER IS NOT NULL AND FIRST_EVENT IS NOT NULL AND EXPIRES_AT > EVENT_NOW()
            ORDER BY 1
            INTO :RANGE_FIRST, :RANGE_LAST
        DO
            IF (COVERED_TO IS NULL OR RANGE_LAST > COVERED_TO) THEN
            BEGIN
                SELECT COUNT(*), COALESCE(SUM(IIF(LAST_ERROR IS NULL, 0, 1)), 0) FROM EVENT_LOG
                WHERE SUB_ID = :SUB_ID AND DEAD = FALSE
                  AND EVENT_ID BETWEEN MAXVALUE(:RANGE_FIRST, COALESCE(:COVERED_TO + 1, :RANGE_FIRST)) AND :RANGE_LAST
                INTO :COUNTED, :FAILED_COUNTED;
                IN_FLIGHT = IN_FLIGHT + COUNTED;
                FAILED = FAILED - FAILED_COUNTED;
                COVERED_TO = RANGE_LAST;
            END
        SUSPEND;
    END
END;

-- name: failed
-- The retry time runs on EVENT_NOW() (UTC on Firebird 4 and later): shown in
-- subs's zone, as CREATED_AT is.
SELECT l.EVENT_ID, TRIM(s.TAG), TRIM(TRAILING FROM s.TABLE_NAME), s.ACTION, l.PK_ROW, l.ATTEMPTS,
       l.LAST_ERROR, l.CREATED_AT,
       DATEADD(DATEDIFF(MILLISECOND FROM EVENT_NOW() TO LOCALTIMESTAMP) MILLISECOND TO l.NEXT_ATTEMPT_AT)
FROM EVENT_LOG l JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID
WHERE l.DEAD_AT IS NULL AND l.LAST_ERROR IS NOT NULL
ORDER BY l.EVENT_ID
FETCH FIRST ? ROWS ONLY;

-- name: dead
SELECT l.EVENT_ID, TRIM(s.TAG), TRIM(TRAILING FROM s.TABLE_NAME), s.ACTION, l.PK_ROW, l.ATTEMPTS,
       l.LAST_ERROR, l.CREATED_AT, l.DEAD_AT
FROM EVENT_LOG l JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID
WHERE l.DEAD_AT IS NOT NULL
ORDER BY l.EVENT_ID
FETCH FIRST ? ROWS ONLY;

-- name: backfills
-- Where each `subs backfill` run stands (per insert subscription), and
-- whether an attachment this user may see in MON$ runs it (backfill.sql,
-- mark_running).
SELECT b.SUB_ID, b.ROWS_DONE, b.ROWS_TOTAL, b.EVENTS, b.FINISHED_AT IS NOT NULL,
       DATEDIFF(MILLISECOND FROM b.UPDATED_AT TO LOCALTIMESTAMP),
       EXISTS (SELECT 1 FROM MON$CONTEXT_VARIABLES v
               WHERE v.MON$VARIABLE_NAME = 'SUBS_BACKFILL' AND v.MON$TRANSACTION_ID IS NULL
                 AND v.MON$VARIABLE_VALUE = CAST(b.SUB_ID AS VARCHAR(20)))
FROM EVENT_BACKFILL b;

-- name: oldest_transaction
-- The database's oldest active transaction, as MON$ shows it to this user
-- (SYSDBA and the database's owner see every attachment's, others only
-- their own): its id, milliseconds open, user and process. No row when
-- this user may not see it.
SELECT t.MON$TRANSACTION_ID, DATEDIFF(MILLISECOND FROM t.MON$TIMESTAMP TO CURRENT_TIMESTAMP),
       TRIM(a.MON$USER), a.MON$REMOTE_PROCESS
FROM MON$DATABASE d
JOIN MON$TRANSACTIONS t ON t.MON$TRANSACTION_ID = d.MON$OLDEST_ACTIVE
JOIN MON$ATTACHMENTS a ON a.MON$ATTACHMENT_ID = t.MON$ATTACHMENT_ID;
