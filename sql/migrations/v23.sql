-- Schema version 23: leases and retry times run on EVENT_NOW(), UTC on
-- Firebird 4 and later, instead of LOCALTIMESTAMP, the wall time of subs's
-- zone. Where that zone has daylight saving time, the moment the clocks
-- went forward ended every lease at once (their events claimed again while
-- their handlers ran), and putting them back held released leases and due
-- retries for an hour more. The times already stored move to the new
-- clock (unchanged on Firebird 3, where EVENT_NOW() is LOCALTIMESTAMP).
-- Listeners of an older release must be stopped first, as every upgrade
-- asks: one left running would keep writing wall times.
-- The function is a frozen copy of sql/schema.sql as it was for version 23.

-- name: before/now_function
-- EVENT_NOW(): the clock of leases and retry times (EVENT_LEASE and
-- EVENT_SPAN.EXPIRES_AT, EVENT_LOG.NEXT_ATTEMPT_AT). UTC on Firebird 4 and
-- later: as LOCALTIMESTAMP, the wall time of subs's zone, the moment a
-- daylight saving time change put the clocks forward ended every lease at
-- once (their events claimed again while their handlers ran), and putting
-- them back held released leases and due retries for an hour more.
-- LOCALTIMESTAMP on Firebird 3, which has no time zones. DETERMINISTIC and
-- without arguments, the engine evaluates it once per statement, as it
-- does LOCALTIMESTAMP (a plain function cost every row of a claim's scan).
EXECUTE BLOCK
AS
BEGIN
    EXECUTE STATEMENT 'CREATE OR ALTER FUNCTION EVENT_NOW RETURNS TIMESTAMP DETERMINISTIC AS BEGIN RETURN '
        || IIF(RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION') STARTING WITH '3.', 'LOCALTIMESTAMP',
               'DATEADD(MINUTE, -(EXTRACT(TIMEZONE_HOUR FROM CURRENT_TIMESTAMP) * 60 '
               || '+ EXTRACT(TIMEZONE_MINUTE FROM CURRENT_TIMESTAMP)), LOCALTIMESTAMP)')
        || '; END';
END;

-- name: move_lease_times
-- DATEDIFF(... LOCALTIMESTAMP TO EVENT_NOW()) is minus the zone's offset now.
UPDATE EVENT_LEASE SET EXPIRES_AT = DATEADD(DATEDIFF(MILLISECOND FROM LOCALTIMESTAMP TO EVENT_NOW()) MILLISECOND TO EXPIRES_AT)
WHERE EXPIRES_AT IS NOT NULL;

-- name: move_span_times
UPDATE EVENT_SPAN SET EXPIRES_AT = DATEADD(DATEDIFF(MILLISECOND FROM LOCALTIMESTAMP TO EVENT_NOW()) MILLISECOND TO EXPIRES_AT);

-- name: move_retry_times
UPDATE EVENT_LOG
SET NEXT_ATTEMPT_AT = DATEADD(DATEDIFF(MILLISECOND FROM LOCALTIMESTAMP TO EVENT_NOW()) MILLISECOND TO NEXT_ATTEMPT_AT)
WHERE NEXT_ATTEMPT_AT IS NOT NULL;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 23;
END;
