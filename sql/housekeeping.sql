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
-- commit, and if the commit fails it stays as it was, active.
ALTER INDEX IX_EVENT_LOG_QUEUE ACTIVE;
