-- Per-minute delivery statistics (EVENT_STATS): recorded by each listener's
-- supervisor (delivery/stats.py), read by the console (ops/console.py).

-- name: server_time
SELECT LOCALTIMESTAMP FROM RDB$DATABASE;

-- name: add
-- A listener adds to its own row of the minute: no other listener writes it.
MERGE INTO EVENT_STATS s
USING (SELECT CAST(? AS TIMESTAMP) AS MINUTE_AT, CAST(? AS INTEGER) AS SUB_ID,
              CAST(? AS VARCHAR(100) CHARACTER SET UTF8) AS RECORDER,
              CAST(? AS INTEGER) AS HANDLED, CAST(? AS INTEGER) AS FAILED, CAST(? AS INTEGER) AS DEAD
       FROM RDB$DATABASE) n
ON s.MINUTE_AT = n.MINUTE_AT AND s.SUB_ID = n.SUB_ID AND s.RECORDER = n.RECORDER
WHEN MATCHED THEN
    UPDATE SET HANDLED = s.HANDLED + n.HANDLED, FAILED = s.FAILED + n.FAILED, DEAD = s.DEAD + n.DEAD
WHEN NOT MATCHED THEN
    INSERT (MINUTE_AT, SUB_ID, RECORDER, HANDLED, FAILED, DEAD)
    VALUES (n.MINUTE_AT, n.SUB_ID, n.RECORDER, n.HANDLED, n.FAILED, n.DEAD);

-- name: prune
-- Rows of minutes before ? (a negative number of) minutes ago, on the
-- primary key's leading MINUTE_AT.
DELETE FROM EVENT_STATS WHERE MINUTE_AT < DATEADD(? MINUTE TO LOCALTIMESTAMP);

-- name: backlog
-- A listener's sample of a subscription's live events in this minute.
MERGE INTO EVENT_STATS s
USING (SELECT CAST(? AS TIMESTAMP) AS MINUTE_AT, CAST(? AS INTEGER) AS SUB_ID,
              CAST(? AS VARCHAR(100) CHARACTER SET UTF8) AS RECORDER, CAST(? AS INTEGER) AS BACKLOG
       FROM RDB$DATABASE) n
ON s.MINUTE_AT = n.MINUTE_AT AND s.SUB_ID = n.SUB_ID AND s.RECORDER = n.RECORDER
WHEN MATCHED THEN
    UPDATE SET BACKLOG = n.BACKLOG
WHEN NOT MATCHED THEN
    INSERT (MINUTE_AT, SUB_ID, RECORDER, BACKLOG) VALUES (n.MINUTE_AT, n.SUB_ID, n.RECORDER, n.BACKLOG);
