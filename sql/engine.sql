-- name: attachment
-- The engine serving the database, and the role the attachment took: an
-- engine attaches with no role (NONE) when the role asked for does not
-- exist or is not granted to the user, without saying so.
-- On Firebird 4 and later it also moves the attachment into subs's time
-- zone, EVENT_TIME_ZONE() (schema.sql), when its session has another.
-- Every LOCALTIMESTAMP of subs's own SQL (leases, retry times, ages) is
-- then that zone's, as the capture triggers' stamps are. An embedded
-- engine takes the session's zone from its process's TZ: `subs purge
-- --older-than 1h` from a shell in Asia/Tokyo deleted events of a UTC
-- database that had died a moment ago, and a listener there would read
-- the leases of one in UTC as expired 9 hours ago.
-- A user without the right to the function (not made a listener by
-- `subs grant`) keeps its session's zone, and so does every attachment
-- when the engine does not know the zone (UNKNOWN_ZONE names it then: the
-- database was restored on an engine with older time zone data).
EXECUTE BLOCK RETURNS (ENGINE_VERSION VARCHAR(20) CHARACTER SET ASCII, ROLE_NAME VARCHAR(63) CHARACTER SET UTF8,
                       UNKNOWN_ZONE VARCHAR(63) CHARACTER SET UTF8)
AS
DECLARE zone VARCHAR(63) CHARACTER SET UTF8;
DECLARE known INTEGER;
BEGIN
    ENGINE_VERSION = RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION');
    ROLE_NAME = TRIM(TRAILING FROM CURRENT_ROLE);
    IF (ENGINE_VERSION NOT STARTING WITH '3.'
        AND EXISTS(SELECT 1 FROM RDB$FUNCTIONS
                   WHERE RDB$FUNCTION_NAME = 'EVENT_TIME_ZONE' AND RDB$PACKAGE_NAME IS NULL)) THEN
    BEGIN
        BEGIN
            EXECUTE STATEMENT 'SELECT EVENT_TIME_ZONE() FROM RDB$DATABASE' INTO zone;
            WHEN GDSCODE no_priv DO
                zone = NULL;
        END
        IF (zone <> RDB$GET_CONTEXT('SYSTEM', 'SESSION_TIMEZONE')) THEN
        BEGIN
            BEGIN
                EXECUTE STATEMENT 'SELECT 1 FROM RDB$DATABASE WHERE CURRENT_TIMESTAMP AT TIME ZONE '''
                    || REPLACE(zone, '''', '''''') || ''' IS NOT NULL' INTO known;
                WHEN ANY DO
                    UNKNOWN_ZONE = zone;
            END
            IF (UNKNOWN_ZONE IS NULL) THEN
                EXECUTE STATEMENT 'SET TIME ZONE ''' || REPLACE(zone, '''', '''''') || '''';
        END
    END
    SUSPEND;
END
