-- name: queue_depth
-- Per subscription: its live events walked in log order on the claim index
-- up to MAX_COUNTED (LIVE_MORE: there are more), split into pending, in
-- flight (in a span a parallel worker holds, or in the batch an ordered one
-- has in hand) and failed (waiting for a retry); its dead events counted up to
-- MAX_COUNTED (DEAD_MORE); the oldest live event's age in ms. The cost of a
-- refresh does not grow with the length of the log. Read by the metrics
-- endpoint and the console's overview (the listener's backlog samples
-- count the same live events: stats.sql's record_backlog).
EXECUTE BLOCK (MAX_COUNTED INTEGER = ?)
RETURNS (SUB_ID INTEGER, TABLE_NAME VARCHAR(63) CHARACTER SET UTF8, ACTION CHAR(1) CHARACTER SET ASCII,
         TAG VARCHAR(40) CHARACTER SET ASCII, PENDING INTEGER, IN_FLIGHT INTEGER, OLDEST_MS BIGINT,
         FAILED INTEGER, DEAD INTEGER, ACTIVE BOOLEAN, PAUSED BOOLEAN, LIVE_MORE BOOLEAN, DEAD_MORE BOOLEAN)
AS
DECLARE EVENT BIGINT;
DECLARE CREATED TIMESTAMP;
DECLARE IN_SPAN BOOLEAN;
DECLARE ERROR_LOGGED BOOLEAN;
DECLARE LEASE_FIRST BIGINT;
DECLARE LEASE_LAST BIGINT;
DECLARE WALKED INTEGER;
BEGIN
    FOR SELECT SUB_ID, TRIM(TRAILING FROM TABLE_NAME), ACTION, TRIM(TAG), ACTIVE, PAUSED FROM EVENT_SUBSCRIBER ORDER BY SUB_ID
        INTO :SUB_ID, :TABLE_NAME, :ACTION, :TAG, :ACTIVE, :PAUSED
    DO
    BEGIN
        PENDING = 0;
        IN_FLIGHT = 0;
        FAILED = 0;
        WALKED = 0;
        OLDEST_MS = NULL;
        LEASE_FIRST = NULL;
        LEASE_LAST = NULL;
        SELECT FIRST_EVENT, LAST_EVENT FROM EVENT_LEASE
        WHERE SUB_ID = :SUB_ID AND HOLDER IS NOT NULL AND EXPIRES_AT > EVENT_NOW()
        INTO :LEASE_FIRST, :LEASE_LAST;
        FOR SELECT FIRST (:MAX_COUNTED + 1) l.EVENT_ID, l.CREATED_AT, l.LAST_ERROR IS NOT NULL,
                   EXISTS (SELECT 1 FROM EVENT_SPAN sp
                           WHERE sp.SUB_ID = l.SUB_ID AND sp.FIRST_EVENT <= l.EVENT_ID
                             AND sp.LAST_EVENT >= l.EVENT_ID AND sp.EXPIRES_AT > EVENT_NOW())
            FROM EVENT_LOG l
            WHERE l.SUB_ID = :SUB_ID AND l.DEAD = FALSE
            ORDER BY l.SUB_ID, l.DEAD, l.EVENT_ID
            INTO :EVENT, :CREATED, :ERROR_LOGGED, :IN_SPAN
        DO
        BEGIN
            WALKED = WALKED + 1;
            IF (WALKED <= MAX_COUNTED) THEN
            BEGIN
                OLDEST_MS = COALESCE(OLDEST_MS, DATEDIFF(MILLISECOND FROM CREATED TO LOCALTIMESTAMP));
                IF (IN_SPAN OR COALESCE(EVENT BETWEEN LEASE_FIRST AND LEASE_LAST, FALSE)) THEN
                    IN_FLIGHT = IN_FLIGHT + 1;
                ELSE IF (ERROR_LOGGED) THEN
                    FAILED = FAILED + 1;
                ELSE
                    PENDING = PENDING + 1;
            END
        END
        LIVE_MORE = WALKED > MAX_COUNTED;
        SELECT COUNT(*) FROM (SELECT FIRST (:MAX_COUNTED + 1) 1 AS ONE FROM EVENT_LOG
                              WHERE SUB_ID = :SUB_ID AND DEAD = TRUE)
        INTO :DEAD;
        DEAD_MORE = DEAD > MAX_COUNTED;
        IF (DEAD_MORE) THEN
            DEAD = MAX_COUNTED;
        SUSPEND;
    END
END;
