-- name: status
-- Per subscription: pending (waiting, including failed ones waiting for a
-- retry), in flight (in a span a parallel worker holds, or in the batch an
-- ordered one has in hand, lease running), failed, dead, oldest pending.
SELECT s.SUB_ID, TRIM(s.TABLE_NAME), s.ACTION, TRIM(s.TAG), s.ACTIVE, s.PAUSED,
       SUM(IIF(e.SUB_ID IS NOT NULL AND e.DEAD_AT IS NULL AND NOT e.HELD, 1, 0)),
       SUM(IIF(e.DEAD_AT IS NULL AND e.HELD, 1, 0)),
       SUM(IIF(e.DEAD_AT IS NULL AND e.LAST_ERROR IS NOT NULL, 1, 0)),
       SUM(IIF(e.DEAD_AT IS NOT NULL, 1, 0)),
       DATEDIFF(MILLISECOND FROM MIN(IIF(e.DEAD_AT IS NULL, e.CREATED_AT, NULL)) TO LOCALTIMESTAMP)
FROM EVENT_SUBSCRIBER s
LEFT JOIN (SELECT l.SUB_ID, l.DEAD_AT, l.LAST_ERROR, l.CREATED_AT,
                  EXISTS (SELECT 1 FROM EVENT_SPAN sp
                          WHERE sp.SUB_ID = l.SUB_ID AND sp.FIRST_EVENT <= l.EVENT_ID
                            AND sp.LAST_EVENT >= l.EVENT_ID AND sp.EXPIRES_AT > LOCALTIMESTAMP)
                  OR COALESCE(l.EVENT_ID BETWEEN h.FIRST_EVENT AND h.LAST_EVENT, FALSE) AS HELD
           FROM EVENT_LOG l
           LEFT JOIN EVENT_LEASE h ON h.SUB_ID = l.SUB_ID AND h.HOLDER IS NOT NULL
                                  AND h.EXPIRES_AT > LOCALTIMESTAMP) e ON e.SUB_ID = s.SUB_ID
GROUP BY s.SUB_ID, s.TABLE_NAME, s.ACTION, s.TAG, s.ACTIVE, s.PAUSED
ORDER BY s.SUB_ID;

-- name: failed
SELECT l.EVENT_ID, TRIM(s.TAG), TRIM(s.TABLE_NAME), s.ACTION, l.PK_ROW, l.ATTEMPTS,
       l.LAST_ERROR, l.CREATED_AT, l.NEXT_ATTEMPT_AT
FROM EVENT_LOG l JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID
WHERE l.DEAD_AT IS NULL AND l.LAST_ERROR IS NOT NULL
ORDER BY l.EVENT_ID;

-- name: dead
SELECT l.EVENT_ID, TRIM(s.TAG), TRIM(s.TABLE_NAME), s.ACTION, l.PK_ROW, l.ATTEMPTS,
       l.LAST_ERROR, l.CREATED_AT, l.DEAD_AT
FROM EVENT_LOG l JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID
WHERE l.DEAD_AT IS NOT NULL
ORDER BY l.EVENT_ID;

-- name: backfills
-- Where each `subs backfill` run stands (per insert subscription).
SELECT SUB_ID, ROWS_DONE, ROWS_TOTAL, EVENTS, FINISHED_AT IS NOT NULL,
       DATEDIFF(MILLISECOND FROM UPDATED_AT TO LOCALTIMESTAMP)
FROM EVENT_BACKFILL;
