-- The console's queries (`subs web`, ops/console.py). Nothing here counts a
-- whole log: lists walk the claim index (SUB_ID, DEAD, EVENT_ID) or the key
-- index (KEY_HASH, EVENT_ID) from a keyset cursor, and counts stop at a bound,
-- so a page costs about the same with a thousand or a million events.
-- An event's STATE is P (pending), F (failed: waiting for a retry) or D
-- (dead); HELD is true while a worker has it in hand (its lease running).

-- name: overview
-- Per subscription: its live events walked in log order up to MAX_COUNTED
-- (LIVE_MORE: there are more), split into pending, in flight and failed; its
-- dead events counted up to MAX_COUNTED (DEAD_MORE); the oldest live event's age.
EXECUTE BLOCK (MAX_COUNTED INTEGER = ?)
RETURNS (SUB_ID INTEGER, TABLE_NAME VARCHAR(63) CHARACTER SET UTF8, ACTION CHAR(1) CHARACTER SET ASCII,
         TAG VARCHAR(40) CHARACTER SET ASCII, ACTIVE BOOLEAN, PAUSED BOOLEAN,
         PENDING INTEGER, IN_FLIGHT INTEGER, FAILED INTEGER, LIVE_MORE BOOLEAN,
         DEAD INTEGER, DEAD_MORE BOOLEAN, OLDEST_MS BIGINT)
AS
DECLARE EVENT BIGINT;
DECLARE CREATED TIMESTAMP;
DECLARE CLAIM_EXPIRES TIMESTAMP;
DECLARE ERROR_LOGGED BOOLEAN;
DECLARE LEASE_FIRST BIGINT;
DECLARE LEASE_LAST BIGINT;
DECLARE WALKED INTEGER;
BEGIN
    FOR SELECT SUB_ID, TRIM(TABLE_NAME), ACTION, TRIM(TAG), ACTIVE, PAUSED FROM EVENT_SUBSCRIBER ORDER BY SUB_ID
        INTO :SUB_ID, :TABLE_NAME, :ACTION, :TAG, :ACTIVE, :PAUSED
    DO
    BEGIN
        PENDING = 0;
        IN_FLIGHT = 0;
        FAILED = 0;
        WALKED = 0;
        OLDEST_MS = NULL;
        LEASE_FIRST = NULL;
        LEASE_LAST = NULL;
        SELECT FIRST_EVENT, LAST_EVENT FROM EVENT_LEASE
        WHERE SUB_ID = :SUB_ID AND HOLDER IS NOT NULL AND EXPIRES_AT > LOCALTIMESTAMP
        INTO :LEASE_FIRST, :LEASE_LAST;
        FOR SELECT FIRST (:MAX_COUNTED + 1) EVENT_ID, CREATED_AT, CLAIM_EXPIRES_AT, LAST_ERROR IS NOT NULL
            FROM EVENT_LOG
            WHERE SUB_ID = :SUB_ID AND DEAD = FALSE
            ORDER BY SUB_ID, DEAD, EVENT_ID
            INTO :EVENT, :CREATED, :CLAIM_EXPIRES, :ERROR_LOGGED
        DO
        BEGIN
            WALKED = WALKED + 1;
            IF (WALKED <= MAX_COUNTED) THEN
            BEGIN
                OLDEST_MS = COALESCE(OLDEST_MS, DATEDIFF(MILLISECOND FROM CREATED TO LOCALTIMESTAMP));
                IF (COALESCE(CLAIM_EXPIRES > LOCALTIMESTAMP, FALSE)
                    OR COALESCE(EVENT BETWEEN LEASE_FIRST AND LEASE_LAST, FALSE)) THEN
                    IN_FLIGHT = IN_FLIGHT + 1;
                ELSE IF (ERROR_LOGGED) THEN
                    FAILED = FAILED + 1;
                ELSE
                    PENDING = PENDING + 1;
            END
        END
        LIVE_MORE = WALKED > MAX_COUNTED;
        SELECT COUNT(*) FROM (SELECT FIRST (:MAX_COUNTED + 1) 1 AS ONE FROM EVENT_LOG
                              WHERE SUB_ID = :SUB_ID AND DEAD = TRUE)
        INTO :DEAD;
        DEAD_MORE = DEAD > MAX_COUNTED;
        IF (DEAD_MORE) THEN
            DEAD = MAX_COUNTED;
        SUSPEND;
    END
END;

-- name: stats
-- Per subscription and minute from the minute ? on: events handled, failed
-- and gone dead (summed over the listeners) and the backlog they saw.
SELECT SUB_ID, MINUTE_AT, SUM(HANDLED), SUM(FAILED), SUM(DEAD), MAX(BACKLOG)
FROM EVENT_STATS
WHERE MINUTE_AT >= ?
GROUP BY SUB_ID, MINUTE_AT
ORDER BY SUB_ID, MINUTE_AT;

-- name: server_minute
SELECT LOCALTIMESTAMP FROM RDB$DATABASE;

-- name: held
(COALESCE(l.CLAIM_EXPIRES_AT > LOCALTIMESTAMP, FALSE)
 OR EXISTS (SELECT 1 FROM EVENT_LEASE h
            WHERE h.SUB_ID = l.SUB_ID AND h.HOLDER IS NOT NULL AND h.EXPIRES_AT > LOCALTIMESTAMP
              AND l.EVENT_ID BETWEEN h.FIRST_EVENT AND h.LAST_EVENT))

-- name: state
IIF(l.DEAD, 'D', IIF(l.LAST_ERROR IS NULL, 'P', 'F'))

-- name: event_columns
-- Rows of up to 32,000 bytes come as VARCHAR, longer ones as BLOB.
l.EVENT_ID, l.SUB_ID, l.PK_ROW,
IIF(OCTET_LENGTH(l.OLD_ROW) <= 32000, CAST(l.OLD_ROW AS VARCHAR(32000) CHARACTER SET OCTETS), NULL),
IIF(OCTET_LENGTH(l.OLD_ROW) > 32000, l.OLD_ROW, NULL),
IIF(OCTET_LENGTH(l.NEW_ROW) <= 32000, CAST(l.NEW_ROW AS VARCHAR(32000) CHARACTER SET OCTETS), NULL),
IIF(OCTET_LENGTH(l.NEW_ROW) > 32000, l.NEW_ROW, NULL),
{{state}}, {{held}}, l.ATTEMPTS, l.LAST_ERROR, l.CREATED_AT, l.NEXT_ATTEMPT_AT, l.DEAD_AT, l.CLAIMED_BY

-- name: subscription_events
-- Up to ? events of one subscription after an EVENT_ID, live (DEAD FALSE)
-- or dead, whose STATE is LIKE the last parameter, on the claim index.
SELECT FIRST (?) {{event_columns}}
FROM EVENT_LOG l
WHERE l.SUB_ID = ? AND l.DEAD = ? AND l.EVENT_ID > ? AND {{state}} LIKE ?
ORDER BY l.SUB_ID, l.DEAD, l.EVENT_ID;

-- name: row_events
-- Up to ? events of one row (KEY_HASH and PK_ROW) after an EVENT_ID, on the
-- key index, of the table's subscriptions (one of them when the sixth
-- parameter is set) whose STATE is LIKE the last parameter.
SELECT FIRST (?) {{event_columns}}
FROM EVENT_LOG l
WHERE l.KEY_HASH = ? AND l.PK_ROW = ? AND l.EVENT_ID > ?
  AND l.SUB_ID IN (SELECT s.SUB_ID FROM EVENT_SUBSCRIBER s WHERE s.TABLE_NAME = ?)
  AND (CAST(? AS INTEGER) IS NULL OR l.SUB_ID = ?)
  AND {{state}} LIKE ?
ORDER BY l.KEY_HASH, l.EVENT_ID;

-- name: event
SELECT {{event_columns}}, l.CLAIM_EXPIRES_AT
FROM EVENT_LOG l
WHERE l.EVENT_ID = ?;

-- name: subscriptions
SELECT SUB_ID, TRIM(TABLE_NAME), ACTION, TRIM(TAG), ACTIVE, PAUSED FROM EVENT_SUBSCRIBER ORDER BY SUB_ID;

-- name: retry_failed
-- A failed event waiting for its retry is made due now.
UPDATE EVENT_LOG SET NEXT_ATTEMPT_AT = LOCALTIMESTAMP
WHERE EVENT_ID = ? AND DEAD = FALSE AND LAST_ERROR IS NOT NULL;

-- name: retry_dead
UPDATE EVENT_LOG
SET DEAD = FALSE, DEAD_AT = NULL, ATTEMPTS = 0, NEXT_ATTEMPT_AT = NULL, LAST_ERROR = NULL
WHERE EVENT_ID = ? AND DEAD = TRUE;

-- name: retry_dead_of_subscription
UPDATE EVENT_LOG
SET DEAD = FALSE, DEAD_AT = NULL, ATTEMPTS = 0, NEXT_ATTEMPT_AT = NULL, LAST_ERROR = NULL
WHERE SUB_ID = ? AND DEAD = TRUE;

-- name: discard
DELETE FROM EVENT_LOG WHERE EVENT_ID = ?;
