-- Schema version 12: a parallel claim leases runs of a subscription's events
-- (EVENT_SPAN) instead of writing CLAIMED_BY and CLAIM_EXPIRES_AT into
-- every event it claims: the write cost parallel mode more than everything
-- else a no-op handler's event costs. Events claimed the old way are
-- pending again once the columns are gone (their attempt was counted).

-- name: create_span
CREATE TABLE EVENT_SPAN (
    SPAN_ID      BIGINT NOT NULL,
    SUB_ID       INTEGER NOT NULL,
    FIRST_EVENT  BIGINT NOT NULL,
    LAST_EVENT   BIGINT NOT NULL,
    HOLDER       VARCHAR(100) CHARACTER SET UTF8 NOT NULL,
    EXPIRES_AT   TIMESTAMP NOT NULL,
    CONSTRAINT PK_EVENT_SPAN PRIMARY KEY (SPAN_ID)
);

-- name: create_span_index
CREATE INDEX IX_EVENT_SPAN_SUB ON EVENT_SPAN (SUB_ID, LAST_EVENT);

-- name: create_span_ids
CREATE SEQUENCE EVENT_SPAN_IDS;

-- name: drop_claim_columns
ALTER TABLE EVENT_LOG DROP CLAIMED_BY, DROP CLAIM_EXPIRES_AT;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 12;
END;
