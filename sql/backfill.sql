-- `subs backfill`: delivering a table's existing rows to the subscribers
-- of one (table, tag) as insert events, chunk by chunk (ops/backfill.py).
-- The chunk statements come from the generator, EVENT_BACKFILL_SOURCE
-- (capture.sql); EVENT_BACKFILL keeps where a run stands.

-- name: insert_subscription
SELECT SUB_ID, ACTION FROM EVENT_SUBSCRIBER
WHERE TABLE_NAME = ? AND TAG = ? AND ACTIVE;

-- name: source
SELECT FIRST_CHUNK, NEXT_CHUNK, COUNT_ROWS, REASON FROM EVENT_BACKFILL_SOURCE(?, ?);

-- name: shape
-- Whether the subscription is active, and what a run's chunk statements
-- are made from: the table's record format (a new one for each ADD, DROP
-- or ALTER of a column), its primary key and the subscription's --when
-- condition. Read before each chunk: statements prepared before the
-- application's DDL would go on reading the old columns (the values of a
-- dropped one, none of an added one).
SELECT s.ACTIVE, r.RDB$FORMAT,
       (SELECT LIST(TRIM(TRAILING FROM k.RDB$FIELD_NAME), '","') FROM (
            SELECT seg.RDB$FIELD_NAME
            FROM RDB$RELATION_CONSTRAINTS c
            JOIN RDB$INDEX_SEGMENTS seg ON seg.RDB$INDEX_NAME = c.RDB$INDEX_NAME
            WHERE c.RDB$RELATION_NAME = s.TABLE_NAME AND c.RDB$CONSTRAINT_TYPE = 'PRIMARY KEY'
            ORDER BY seg.RDB$FIELD_POSITION) k),
       s.WHEN_CONDITION
FROM EVENT_SUBSCRIBER s
LEFT JOIN RDB$RELATIONS r ON r.RDB$RELATION_NAME = s.TABLE_NAME
WHERE s.SUB_ID = ?;

-- name: mark_running
-- Marks this attachment as running the backfill of subscription ? (NULL:
-- no longer), so that `subs status` can tell a running backfill from one
-- that stopped: the mark goes with the attachment when the process ends.
SELECT RDB$SET_CONTEXT('USER_SESSION', 'SUBS_BACKFILL', ?) FROM RDB$DATABASE;

-- name: state
SELECT WHERE_CONDITION, LAST_KEY, ROWS_DONE, EVENTS, ROWS_TOTAL, FINISHED_AT
FROM EVENT_BACKFILL WHERE SUB_ID = ?;

-- name: start
UPDATE OR INSERT INTO EVENT_BACKFILL
    (SUB_ID, WHERE_CONDITION, LAST_KEY, ROWS_DONE, EVENTS, ROWS_TOTAL, STARTED_AT, UPDATED_AT, FINISHED_AT)
VALUES (?, ?, NULL, 0, 0, ?, LOCALTIMESTAMP, LOCALTIMESTAMP, NULL)
MATCHING (SUB_ID);

-- name: chunk_done
-- Only where this run left the backfill (ROWS_DONE: the last ?) and while
-- its subscription is active: a second run of the same backfill, or a
-- --restart, that moved it on meanwhile (after a conflict, when both ran at
-- once), or a `subs remove`, makes this update find no row, and the chunk
-- is rolled back. A last chunk of no rows keeps LAST_KEY.
UPDATE EVENT_BACKFILL
SET LAST_KEY = COALESCE(?, LAST_KEY), ROWS_DONE = ROWS_DONE + ?, EVENTS = EVENTS + ?, UPDATED_AT = LOCALTIMESTAMP
WHERE SUB_ID = ? AND ROWS_DONE = ? AND FINISHED_AT IS NULL
AND EXISTS (SELECT 1 FROM EVENT_SUBSCRIBER S WHERE S.SUB_ID = EVENT_BACKFILL.SUB_ID AND S.ACTIVE);

-- name: finish
UPDATE EVENT_BACKFILL SET FINISHED_AT = LOCALTIMESTAMP, UPDATED_AT = LOCALTIMESTAMP WHERE SUB_ID = ?;
