-- Schema version 4: ordered consumption leases the subscription for the
-- batch in hand instead of writing every event it claims (sql/claims.sql,
-- claim_head): writing each claimed event cost more than everything else a
-- no-op handler's event costs on the embedded engine.

-- name: create_lease
-- One row per subscription an ordered consumer has claimed from; HOLDER is
-- NULL while no batch is in hand. FIRST_EVENT..LAST_EVENT is the batch: its
-- events that are still in the log when the lease is taken over after it ran
-- out get the attempt counted.
CREATE TABLE EVENT_LEASE (
    SUB_ID       INTEGER NOT NULL,
    HOLDER       VARCHAR(100) CHARACTER SET UTF8,
    EXPIRES_AT   TIMESTAMP,
    FIRST_EVENT  BIGINT,
    LAST_EVENT   BIGINT,
    CONSTRAINT PK_EVENT_LEASE PRIMARY KEY (SUB_ID)
);

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 4;
END;
