-- Keeping the claim index compact. Events are deleted in EVENT_ID order, and
-- the engine leaves the emptied leaf pages of IX_EVENT_LOG_QUEUE linked in the
-- index: every claim walks them (about 1.7 pages per 1,000 events handled).
-- Rebuilding the index from the few live events drops them.

-- name: live_events
-- At most ? live events: counting stops there.
SELECT COUNT(*) FROM (SELECT FIRST (?) 1 AS ONE FROM EVENT_LOG);

-- name: deactivate_queue_index
ALTER INDEX IX_EVENT_LOG_QUEUE INACTIVE;

-- name: activate_queue_index
-- In the same transaction as deactivate_queue_index: the index is rebuilt at
-- commit. That transaction holds EVENT_LOG for protected write from its
-- start: a commit the engine refuses because another transaction writes the
-- table ("object TABLE EVENT_LOG is in use") leaves the index active in the
-- catalogue but gone from the table, on Firebird 3, 4 and 5.
ALTER INDEX IX_EVENT_LOG_QUEUE ACTIVE;

-- name: queue_index_probe
-- Names the claim index in its plan. The plan the engine reports says
-- whether it can use the index: one gone from the table (above) is read
-- NATURAL all the same, without an error.
SELECT FIRST 1 1 FROM EVENT_LOG WHERE SUB_ID = 0 PLAN (EVENT_LOG INDEX (IX_EVENT_LOG_QUEUE));
