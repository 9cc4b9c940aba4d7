-- Schema version 11: per-minute delivery statistics for the console
-- (EVENT_STATS), written by listeners and pruned by their housekeeping; the
-- exception an ordered claim of a stream (a table's subscriptions of one
-- tag) undoes itself with.

-- name: create_stats
CREATE TABLE EVENT_STATS (
    MINUTE_AT  TIMESTAMP NOT NULL,
    SUB_ID     INTEGER NOT NULL,
    RECORDER   VARCHAR(100) CHARACTER SET UTF8 NOT NULL,
    HANDLED    INTEGER DEFAULT 0 NOT NULL,
    FAILED     INTEGER DEFAULT 0 NOT NULL,
    DEAD       INTEGER DEFAULT 0 NOT NULL,
    BACKLOG    INTEGER,
    CONSTRAINT PK_EVENT_STATS PRIMARY KEY (MINUTE_AT, SUB_ID, RECORDER)
);

-- name: create_stream_held
CREATE EXCEPTION EVENT_STREAM_HELD 'another consumer holds a batch of this stream';

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 11;
END;
