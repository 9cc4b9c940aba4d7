-- The console's queries (`subs web`, ops/console.py); its overview is
-- metrics.sql's queue_depth. Nothing here counts a whole log: lists walk the claim index (SUB_ID, DEAD, EVENT_ID) or the key
-- index (KEY_HASH, EVENT_ID) from a keyset cursor, and counts stop at a bound,
-- so a page costs about the same with a thousand or a million events.
-- An event's STATE is P (pending), F (failed: waiting for a retry) or D
-- (dead); HELD is true while a worker has it in hand (its lease running).

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

-- name: in_span
-- Span sp (a parallel consumer's lease) covers event l.
sp.SUB_ID = l.SUB_ID AND sp.FIRST_EVENT <= l.EVENT_ID AND sp.LAST_EVENT >= l.EVENT_ID
AND sp.EXPIRES_AT > EVENT_NOW()

-- name: in_batch
-- Lease h (an ordered consumer's batch) covers event l.
h.SUB_ID = l.SUB_ID AND h.HOLDER IS NOT NULL AND h.EXPIRES_AT > EVENT_NOW()
AND l.EVENT_ID BETWEEN h.FIRST_EVENT AND h.LAST_EVENT

-- name: held
(EXISTS (SELECT 1 FROM EVENT_SPAN sp WHERE {{in_span}})
 OR EXISTS (SELECT 1 FROM EVENT_LEASE h WHERE {{in_batch}}))

-- name: held_by
COALESCE((SELECT FIRST 1 sp.HOLDER FROM EVENT_SPAN sp WHERE {{in_span}}),
         (SELECT h.HOLDER FROM EVENT_LEASE h WHERE {{in_batch}}))

-- name: held_until
-- Leases run on EVENT_NOW() (UTC on Firebird 4 and later): shown in subs's
-- zone, as CREATED_AT is.
DATEADD(DATEDIFF(MILLISECOND FROM EVENT_NOW() TO LOCALTIMESTAMP) MILLISECOND TO
        COALESCE((SELECT FIRST 1 sp.EXPIRES_AT FROM EVENT_SPAN sp WHERE {{in_span}}),
                 (SELECT h.EXPIRES_AT FROM EVENT_LEASE h WHERE {{in_batch}})))

-- name: state
IIF(l.DEAD, 'D', IIF(l.LAST_ERROR IS NULL, 'P', 'F'))

-- name: event_columns
-- Rows of up to 32,000 bytes come as VARCHAR, longer ones as BLOB.
l.EVENT_ID, l.SUB_ID, l.PK_ROW,
IIF(OCTET_LENGTH(l.OLD_ROW) <= 32000, CAST(l.OLD_ROW AS VARCHAR(32000) CHARACTER SET OCTETS), NULL),
IIF(OCTET_LENGTH(l.OLD_ROW) > 32000, l.OLD_ROW, NULL),
IIF(OCTET_LENGTH(l.NEW_ROW) <= 32000, CAST(l.NEW_ROW AS VARCHAR(32000) CHARACTER SET OCTETS), NULL),
IIF(OCTET_LENGTH(l.NEW_ROW) > 32000, l.NEW_ROW, NULL),
{{state}}, {{held}}, l.ATTEMPTS, l.LAST_ERROR, l.CREATED_AT,
DATEADD(DATEDIFF(MILLISECOND FROM EVENT_NOW() TO LOCALTIMESTAMP) MILLISECOND TO l.NEXT_ATTEMPT_AT), l.DEAD_AT, {{held_by}}

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
SELECT {{event_columns}}, {{held_until}}
FROM EVENT_LOG l
WHERE l.EVENT_ID = ?;

-- name: subscriptions
SELECT SUB_ID, TRIM(TRAILING FROM TABLE_NAME), ACTION, TRIM(TAG), ACTIVE, PAUSED FROM EVENT_SUBSCRIBER ORDER BY SUB_ID;

-- name: retry_failed
-- A failed event waiting for its retry, and in no worker's hands, is made due now.
UPDATE EVENT_LOG l SET NEXT_ATTEMPT_AT = EVENT_NOW()
WHERE l.EVENT_ID = ? AND l.DEAD = FALSE AND l.LAST_ERROR IS NOT NULL AND NOT {{held}};

-- name: retry_dead
UPDATE EVENT_LOG
SET DEAD = FALSE, DEAD_AT = NULL, ATTEMPTS = 0, NEXT_ATTEMPT_AT = NULL, LAST_ERROR = NULL
WHERE EVENT_ID = ? AND DEAD = TRUE;

-- name: retry_dead_of_subscription
UPDATE EVENT_LOG
SET DEAD = FALSE, DEAD_AT = NULL, ATTEMPTS = 0, NEXT_ATTEMPT_AT = NULL, LAST_ERROR = NULL
WHERE SUB_ID = ? AND DEAD = TRUE;

-- name: discard
-- A failed or dead event in no worker's hands.
DELETE FROM EVENT_LOG l
WHERE l.EVENT_ID = ? AND (l.DEAD OR l.LAST_ERROR IS NOT NULL) AND NOT {{held}};
