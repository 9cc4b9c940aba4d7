-- Claiming events. No claim writes the events it claims: a parallel claim
-- leases runs of a subscription's events (EVENT_SPAN), an ordered claim
-- (claim_head) leases the stream (a table's subscriptions of one tag,
-- EVENT_LEASE). Events whose lease ran out (crashed worker) are claimable
-- again, their attempt counted then; a claim counts none. A claim returns
-- what handlers get of each event it claimed (claimed_columns, the one list
-- of them), so a batch takes one statement.

-- name: claimed_columns
-- Rows of up to 8,000 bytes come as VARCHAR, longer ones as BLOB:
-- reading a BLOB takes several client calls per value, which with quick
-- handlers cost more than the claim itself. Not longer: every returned row
-- is a message of the declared size, and with VARCHAR(32000) copying those
-- cost a parallel claim a third of its time. CREATED_AT comes as text
-- ('YYYY-MM-DD HH:MM:SS.ffff', parsed by Claimer._claimed): firebird-driver
-- decodes a TIMESTAMP with two client calls, a fifth of what fetching a
-- claimed row cost it.
EVENT_ID, SUB_ID, PK_ROW,
IIF(OCTET_LENGTH(OLD_ROW) <= 8000, CAST(OLD_ROW AS VARCHAR(8000) CHARACTER SET OCTETS), NULL),
IIF(OCTET_LENGTH(OLD_ROW) > 8000, OLD_ROW, NULL),
IIF(OCTET_LENGTH(NEW_ROW) <= 8000, CAST(NEW_ROW AS VARCHAR(8000) CHARACTER SET OCTETS), NULL),
IIF(OCTET_LENGTH(NEW_ROW) > 8000, NEW_ROW, NULL),
CAST(CREATED_AT AS VARCHAR(24) CHARACTER SET ASCII), ATTEMPTS

-- name: max_claim_bytes
-- The captured bytes (OLD_ROW and NEW_ROW) after which a claim stops,
-- with the event that reached them: with rows of large BLOBs a batch of
-- 100 (60 events of 5 MB took 660 MB in the listener) would hold them all
-- in memory at once. Rows of a few KB never come near it.
16777216

-- name: event_bytes
-- What event E carries, counted against max_claim_bytes.
COALESCE(OCTET_LENGTH(E.OLD_ROW), 0) + COALESCE(OCTET_LENGTH(E.NEW_ROW), 0)

-- name: claimed_outputs
-- claimed_columns as the output parameters of a PSQL block.
EVENT_ID BIGINT, SUB_ID INTEGER, PK_ROW VARCHAR(1000) CHARACTER SET OCTETS,
OLD_TEXT VARCHAR(8000) CHARACTER SET OCTETS, OLD_BLOB BLOB SUB_TYPE BINARY,
NEW_TEXT VARCHAR(8000) CHARACTER SET OCTETS, NEW_BLOB BLOB SUB_TYPE BINARY,
CREATED_AT VARCHAR(24) CHARACTER SET ASCII, ATTEMPTS INTEGER

-- name: claimed_variables
:EVENT_ID, :SUB_ID, :PK_ROW, :OLD_TEXT, :OLD_BLOB, :NEW_TEXT, :NEW_BLOB, :CREATED_AT, :ATTEMPTS

-- name: in_span
-- Whether event E is in a run of events a parallel consumer has in hand.
EXISTS (SELECT 1 FROM EVENT_SPAN S
        WHERE S.SUB_ID = E.SUB_ID AND S.FIRST_EVENT <= E.EVENT_ID AND S.LAST_EVENT >= E.EVENT_ID
          AND S.EXPIRES_AT > EVENT_NOW())

-- name: add_span
INSERT INTO EVENT_SPAN (SPAN_ID, SUB_ID, FIRST_EVENT, LAST_EVENT, HOLDER, EXPIRES_AT)
VALUES (:SPAN_ID, :THE_SUB, :RUN_FIRST, :RUN_LAST, :OWNER, DATEADD(:LEASE_MS MILLISECOND TO EVENT_NOW()))

-- name: claim
-- Parallel mode: up to MAX_ROWS available events of the subscriptions in
-- IDS (comma-separated ids, taken in that order), each in log order, and
-- no more once they carry max_claim_bytes. No
-- event is written: each run of a subscription's events handed out (every
-- live event from its first to its last) becomes one EVENT_SPAN row, the
-- consumer's lease on them, and every event comes with its run's SPAN_ID
-- and the attempt it is (ATTEMPTS + 1). A subscription is walked only while
-- this transaction holds the lock on its EVENT_LEASE row (NO WAIT): one
-- another claimer holds at this moment is passed over, returned as a row
-- with EVENT_ID NULL, so claimers never wait for or conflict with each
-- other, on any Firebird version. Under the lock, the spans of the
-- subscription that ran out (their holder died) are dropped and their events'
-- attempt counted. An event is available when it is due (not waiting for a
-- retry), not in a span, not in the batch an ordered consumer holds and,
-- with KEY_ORDER, when no earlier live event of its row (table, tag, key)
-- is in the log; any other live event ends a run. Each subscription's walk
-- starts after its entry in AFTERS (a list as long as IDS; 0 from its
-- first event): a claimer resuming where its last claim stopped passes
-- neither the events it has in hand nor those acknowledged since (deleted
-- rows the walk would collect as garbage). A subscription with no live
-- event after its entry is passed over without its lock: an idle one costs
-- a read, not a write to its lease row (each claim wrote all 900 of W12's).
EXECUTE BLOCK (OWNER VARCHAR(100) CHARACTER SET UTF8 = ?, LEASE_MS INTEGER = ?, MAX_ROWS INTEGER = ?,
               KEY_ORDER BOOLEAN = ?, IDS VARCHAR(8000) CHARACTER SET ASCII = ?,
               AFTERS VARCHAR(8000) CHARACTER SET ASCII = ?)
RETURNS ({{claimed_outputs}}, SPAN_ID BIGINT)
AS
DECLARE ID BIGINT;
DECLARE THE_SUB INTEGER;
DECLARE TAKEN INTEGER = 0;
DECLARE TAKEN_BYTES BIGINT = 0;
DECLARE LOCKED BOOLEAN;  -- this claim holds the subscription
DECLARE BUSY BOOLEAN;  -- another claimer holds it
DECLARE CANDIDATE BIGINT;
DECLARE AVAILABLE BOOLEAN;
DECLARE RUN_FIRST BIGINT;
DECLARE RUN_LAST BIGINT;
DECLARE HELD_FIRST BIGINT;
DECLARE HELD_LAST BIGINT;
DECLARE GONE BIGINT;
DECLARE GONE_FIRST BIGINT;
DECLARE GONE_LAST BIGINT;
DECLARE DUE BOOLEAN;
DECLARE SKIP_TO BIGINT;  -- the last event of the span the walk is in
DECLARE AFTER BIGINT;
BEGIN
    IDS = IDS || ',';
    AFTERS = AFTERS || ',';
    WHILE (TAKEN < MAX_ROWS AND TAKEN_BYTES < {{max_claim_bytes}} AND CHAR_LENGTH(IDS) > 1) DO
    BEGIN
        {{next_id}};
        THE_SUB = ID;
        {{next_after}};
        LOCKED = FALSE;
        BUSY = FALSE;
        HELD_FIRST = NULL;
        HELD_LAST = NULL;
        IF (EXISTS (SELECT 1 FROM EVENT_SUBSCRIBER WHERE SUB_ID = :THE_SUB AND NOT PAUSED)
            AND EXISTS (SELECT 1 FROM EVENT_LOG WHERE SUB_ID = :THE_SUB AND DEAD = FALSE AND EVENT_ID > :AFTER
                        PLAN (EVENT_LOG INDEX (IX_EVENT_LOG_QUEUE)))) THEN
        BEGIN
            UPDATE EVENT_LEASE SET HOLDER = HOLDER WHERE SUB_ID = :THE_SUB
            RETURNING IIF(HOLDER IS NOT NULL AND EXPIRES_AT > EVENT_NOW(), FIRST_EVENT, NULL),
                      IIF(HOLDER IS NOT NULL AND EXPIRES_AT > EVENT_NOW(), LAST_EVENT, NULL)
            INTO :HELD_FIRST, :HELD_LAST;
            IF (ROW_COUNT = 0) THEN
                INSERT INTO EVENT_LEASE (SUB_ID) VALUES (:THE_SUB);
            LOCKED = TRUE;
            WHEN GDSCODE LOCK_CONFLICT, GDSCODE UPDATE_CONFLICT, GDSCODE DEADLOCK, GDSCODE UNIQUE_KEY_VIOLATION DO
                BUSY = TRUE;
        END
        IF (LOCKED) THEN
        BEGIN
            FOR SELECT SPAN_ID, FIRST_EVENT, LAST_EVENT FROM EVENT_SPAN
                WHERE SUB_ID = :THE_SUB AND EXPIRES_AT <= EVENT_NOW()
                INTO :GONE, :GONE_FIRST, :GONE_LAST
            DO
            BEGIN
                UPDATE EVENT_LOG SET ATTEMPTS = ATTEMPTS + 1
                WHERE SUB_ID = :THE_SUB AND DEAD = FALSE AND EVENT_ID BETWEEN :GONE_FIRST AND :GONE_LAST;
                DELETE FROM EVENT_SPAN WHERE SPAN_ID = :GONE;
            END
            RUN_FIRST = NULL;
            SKIP_TO = NULL;
            -- DUE is repeated inside AVAILABLE so that an event waiting for
            -- its retry never costs the span probe.
            FOR SELECT E.EVENT_ID, E.NEXT_ATTEMPT_AT IS NULL OR E.NEXT_ATTEMPT_AT <= EVENT_NOW(),
                       (:SKIP_TO IS NULL OR E.EVENT_ID > :SKIP_TO)
                       AND (E.NEXT_ATTEMPT_AT IS NULL OR E.NEXT_ATTEMPT_AT <= EVENT_NOW())
                       AND (:HELD_FIRST IS NULL OR E.EVENT_ID NOT BETWEEN :HELD_FIRST AND :HELD_LAST)
                       AND NOT {{in_span}}
                       AND (:KEY_ORDER IS NOT TRUE
                            OR NOT EXISTS (SELECT 1 FROM EVENT_LOG EARLIER
                                           WHERE EARLIER.KEY_HASH = E.KEY_HASH
                                             AND EARLIER.EVENT_ID < E.EVENT_ID
                                             AND EARLIER.DEAD = FALSE))
                FROM EVENT_LOG E
                WHERE E.SUB_ID = :THE_SUB AND E.DEAD = FALSE AND E.EVENT_ID > :AFTER
                -- Named: for a range of ids the Firebird 3 optimizer reads
                -- the whole log from AFTER on the primary key (every
                -- subscription's events, dead ones too) and sorts it.
                PLAN (E ORDER IX_EVENT_LOG_QUEUE)
                ORDER BY E.SUB_ID, E.DEAD, E.EVENT_ID
                INTO :CANDIDATE, :DUE, :AVAILABLE
            DO
            BEGIN
                IF (AVAILABLE) THEN
                BEGIN
                    EVENT_ID = NULL;
                    SELECT {{claimed_columns}} FROM EVENT_LOG WHERE EVENT_ID = :CANDIDATE
                    INTO {{claimed_variables}};
                    -- Gone if the holder of a span that ran out acknowledged it meanwhile.
                    AVAILABLE = EVENT_ID IS NOT NULL;
                END
                IF (AVAILABLE) THEN
                BEGIN
                    IF (RUN_FIRST IS NULL) THEN
                    BEGIN
                        RUN_FIRST = CANDIDATE;
                        SPAN_ID = NEXT VALUE FOR EVENT_SPAN_IDS;
                    END
                    RUN_LAST = CANDIDATE;
                    ATTEMPTS = ATTEMPTS + 1;
                    SUSPEND;
                    TAKEN = TAKEN + 1;
                    TAKEN_BYTES = TAKEN_BYTES + COALESCE(OCTET_LENGTH(OLD_TEXT), OCTET_LENGTH(OLD_BLOB), 0)
                        + COALESCE(OCTET_LENGTH(NEW_TEXT), OCTET_LENGTH(NEW_BLOB), 0);
                    IF (TAKEN >= MAX_ROWS OR TAKEN_BYTES >= {{max_claim_bytes}}) THEN
                        LEAVE;
                END
                ELSE
                BEGIN
                    IF (RUN_FIRST IS NOT NULL) THEN
                        {{add_span}};
                    RUN_FIRST = NULL;
                    -- Past the span the walk was in, a due event that is
                    -- not available may be the first of another span in
                    -- hand: the rest of it is then passed over without
                    -- looking at the spans again for each event.
                    IF (DUE AND (SKIP_TO IS NULL OR CANDIDATE > SKIP_TO)) THEN
                        SKIP_TO = (SELECT FIRST 1 S.LAST_EVENT FROM EVENT_SPAN S
                                   WHERE S.SUB_ID = :THE_SUB AND S.LAST_EVENT >= :CANDIDATE
                                     AND S.FIRST_EVENT <= :CANDIDATE AND S.EXPIRES_AT > EVENT_NOW());
                END
            END
            IF (RUN_FIRST IS NOT NULL) THEN
                {{add_span}};
        END
        IF (BUSY) THEN
        BEGIN
            EVENT_ID = NULL;
            SUB_ID = THE_SUB;
            SUSPEND;
        END
    END
END;

-- name: ready
-- Ordered mode: the subscriptions in IDS (comma-separated), not paused,
-- whose first live event after their entry in AFTERS (their floors,
-- delivery/floors.py) is available now: only their streams are worth a
-- claim. A listener woken by one event claims one stream instead of trying
-- each of its streams in turn.
EXECUTE BLOCK (IDS VARCHAR(8000) CHARACTER SET ASCII = ?, AFTERS VARCHAR(8000) CHARACTER SET ASCII = ?)
RETURNS (SUB_ID INTEGER)
AS
DECLARE ID BIGINT;
DECLARE AFTER BIGINT;
BEGIN
    AFTERS = AFTERS || ',';
    {{each_id}};
        {{next_after}};
        FOR SELECT s.SUB_ID FROM EVENT_SUBSCRIBER s
            WHERE s.SUB_ID = :ID AND NOT s.PAUSED
              AND (SELECT FIRST 1 (E.NEXT_ATTEMPT_AT IS NULL OR E.NEXT_ATTEMPT_AT <= EVENT_NOW()) AND NOT {{in_span}}
                   FROM EVENT_LOG E
                   WHERE E.SUB_ID = s.SUB_ID AND E.DEAD = FALSE AND E.EVENT_ID > :AFTER
                   PLAN (E ORDER IX_EVENT_LOG_QUEUE)  -- named: see the claim's walk
                   ORDER BY E.SUB_ID, E.DEAD, E.EVENT_ID) IS TRUE
            INTO :SUB_ID
        DO
            SUSPEND;
    END
END;

-- name: stream_subscriptions
-- Header of a loop over the subscriptions of the stream (STREAM_TABLE,
-- STREAM_TAG) that are not paused, in SUB_ID order, each into THE_SUB.
FOR SELECT SUB_ID FROM EVENT_SUBSCRIBER
    WHERE TABLE_NAME = :STREAM_TABLE AND TAG = :STREAM_TAG AND NOT PAUSED
    ORDER BY SUB_ID
    INTO :THE_SUB

-- name: stream_leases
-- Header of a loop over every subscription of the stream, paused or not,
-- each into THE_SUB, to reach its EVENT_LEASE row by its key: with
-- "SUB_ID IN (SELECT ...)" the engine read every lease row (2 ms a
-- statement with 900 subscriptions).
FOR SELECT SUB_ID FROM EVENT_SUBSCRIBER
    WHERE TABLE_NAME = :STREAM_TABLE AND TAG = :STREAM_TAG
    INTO :THE_SUB

-- name: stream_variables
-- The variables of stream_stop and stream_batch.
DECLARE THE_SUB INTEGER;
DECLARE CANDIDATE BIGINT;
DECLARE AVAILABLE BOOLEAN;
DECLARE WALKED INTEGER;
DECLARE WALKED_BYTES BIGINT;
DECLARE CANDIDATE_BYTES BIGINT;
DECLARE STOP_AT BIGINT = 9223372036854775807;
DECLARE HEAD BIGINT;
DECLARE HEAD_AVAILABLE BOOLEAN;
DECLARE BATCH_FIRST BIGINT;
DECLARE BATCH_LAST BIGINT;

-- name: stream_stop
-- Where an ordered batch of the stream's events after AFTER stops
-- (STOP_AT): at the stream's first event that is not available (waiting for
-- its retry, or in a parallel consumer's span), so nothing is ever
-- handled before an earlier event of its stream, and where any of the
-- stream's subscriptions' first MAX_ROWS events end (what comes after them
-- was not read), or its first events that carry max_claim_bytes (so a
-- batch carries at most that much of each subscription's, and one event
-- more). Also the stream's first live event (HEAD) and whether it is
-- available.
{{stream_subscriptions}}
DO
BEGIN
    WALKED = 0;
    WALKED_BYTES = 0;
    FOR SELECT FIRST (:MAX_ROWS) E.EVENT_ID,
               (E.NEXT_ATTEMPT_AT IS NULL OR E.NEXT_ATTEMPT_AT <= EVENT_NOW()) AND NOT {{in_span}},
               {{event_bytes}}
        FROM EVENT_LOG E
        WHERE E.SUB_ID = :THE_SUB AND E.DEAD = FALSE AND E.EVENT_ID > :AFTER AND E.EVENT_ID < :STOP_AT
        ORDER BY E.SUB_ID, E.DEAD, E.EVENT_ID
        INTO :CANDIDATE, :AVAILABLE, :CANDIDATE_BYTES
    DO
    BEGIN
        WALKED = WALKED + 1;
        WALKED_BYTES = WALKED_BYTES + CANDIDATE_BYTES;
        IF (HEAD IS NULL OR CANDIDATE < HEAD) THEN
        BEGIN
            HEAD = CANDIDATE;
            HEAD_AVAILABLE = AVAILABLE;
        END
        IF (AVAILABLE IS NOT TRUE) THEN
        BEGIN
            STOP_AT = CANDIDATE;
            LEAVE;
        END
        IF (WALKED = MAX_ROWS) THEN
            STOP_AT = CANDIDATE + 1;
        IF (WALKED_BYTES >= {{max_claim_bytes}}) THEN
        BEGIN
            STOP_AT = CANDIDATE + 1;
            LEAVE;
        END
    END
END

-- name: stream_batch
-- Hands out the stream's events between AFTER and STOP_AT (up to MAX_ROWS
-- of each subscription; the caller puts them in log order), each with the
-- attempt it is (ATTEMPTS + 1), and notes the batch's first and last event.
{{stream_subscriptions}}
DO
    FOR SELECT FIRST (:MAX_ROWS) {{claimed_columns}}
        FROM EVENT_LOG
        WHERE SUB_ID = :THE_SUB AND DEAD = FALSE AND EVENT_ID > :AFTER AND EVENT_ID < :STOP_AT
        ORDER BY SUB_ID, DEAD, EVENT_ID
        INTO {{claimed_variables}}
    DO
    BEGIN
        ATTEMPTS = ATTEMPTS + 1;
        BATCH_FIRST = MINVALUE(COALESCE(BATCH_FIRST, EVENT_ID), EVENT_ID);
        BATCH_LAST = MAXVALUE(COALESCE(BATCH_LAST, EVENT_ID), EVENT_ID);
        SUSPEND;
    END

-- name: claim_head
-- Ordered mode: the next events of one stream, the subscriptions of one
-- table and tag (its I, U and D) that are not paused, after AFTER (the
-- lowest of their floors, delivery/floors.py) in log order, up to where
-- stream_stop says the batch stops. The stream's lease, not a write to every event,
-- keeps other consumers off the batch: the EVENT_LEASE row of each of its
-- subscriptions records the batch's first and last event until the batch
-- is settled. The rows are taken in SUB_ID order; one another consumer took
-- meanwhile undoes the whole claim (EVENT_STREAM_HELD). ATTEMPTS counts a
-- delivery when it fails, or, when the holder died with the batch in hand
-- (its lease ran out), when the next holder takes the lease over; the
-- attempt handed out is ATTEMPTS + 1.
EXECUTE BLOCK (OWNER VARCHAR(100) CHARACTER SET UTF8 = ?, LEASE_MS INTEGER = ?, MAX_ROWS INTEGER = ?,
               STREAM_TABLE VARCHAR(63) CHARACTER SET UTF8 = ?, STREAM_TAG VARCHAR(40) CHARACTER SET ASCII = ?,
               AFTER BIGINT = ?)
RETURNS ({{claimed_outputs}})
AS
{{stream_variables}};
DECLARE LEFT_FIRST BIGINT;
DECLARE LEFT_LAST BIGINT;
BEGIN
    -- When the stream's first live event is not available, or there is
    -- none, the leases are left alone: an idle stream costs reads, not writes.
    {{stream_stop}}
    IF (HEAD_AVAILABLE IS NOT TRUE) THEN
        EXIT;
    IF (EXISTS (SELECT 1 FROM EVENT_LEASE l JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID
                WHERE s.TABLE_NAME = :STREAM_TABLE AND s.TAG = :STREAM_TAG AND NOT s.PAUSED
                  AND l.HOLDER IS NOT NULL AND l.EXPIRES_AT > EVENT_NOW())) THEN
        EXIT;  -- another consumer has a batch of this stream in hand
    {{stream_subscriptions}}
    DO
    BEGIN
        LEFT_FIRST = NULL;
        LEFT_LAST = NULL;
        UPDATE EVENT_LEASE
        SET HOLDER = :OWNER, EXPIRES_AT = DATEADD(:LEASE_MS MILLISECOND TO EVENT_NOW()),
            FIRST_EVENT = NULL, LAST_EVENT = NULL
        WHERE SUB_ID = :THE_SUB AND (HOLDER IS NULL OR EXPIRES_AT <= EVENT_NOW())
        RETURNING OLD.FIRST_EVENT, OLD.LAST_EVENT INTO :LEFT_FIRST, :LEFT_LAST;
        IF (ROW_COUNT = 0) THEN
        BEGIN
            IF (EXISTS (SELECT 1 FROM EVENT_LEASE WHERE SUB_ID = :THE_SUB)) THEN
                EXCEPTION EVENT_STREAM_HELD;
            INSERT INTO EVENT_LEASE (SUB_ID, HOLDER, EXPIRES_AT)
            VALUES (:THE_SUB, :OWNER, DATEADD(:LEASE_MS MILLISECOND TO EVENT_NOW()));
        END
        IF (LEFT_FIRST IS NOT NULL) THEN
            UPDATE EVENT_LOG SET ATTEMPTS = ATTEMPTS + 1
            WHERE SUB_ID = :THE_SUB AND DEAD = FALSE AND EVENT_ID BETWEEN :LEFT_FIRST AND :LEFT_LAST;
    END
    {{stream_batch}}
    {{stream_leases}}
    DO
        UPDATE EVENT_LEASE SET FIRST_EVENT = :BATCH_FIRST, LAST_EVENT = :BATCH_LAST
        WHERE SUB_ID = :THE_SUB AND HOLDER = :OWNER;
END;

-- name: claim_next
-- Ordered mode: the batch that follows the one the caller holds (AFTER is
-- its last event, HOLDING how many of the stream's events up to AFTER the
-- caller holds: that batch and earlier ones handled but not deleted yet;
-- FLOOR_AFTER is the lowest of the stream's floors, delivery/floors.py),
-- claimed while that one runs, so the stream's handler process goes on
-- without waiting for the claimer. It is taken as claim_head takes a batch
-- (the same stop rules), only under the caller's lease on every
-- subscription of the stream, and only when the stream's live events up to
-- AFTER are the HOLDING ones in hand: an event that committed late with an
-- id among them must come first, so it is left to claim_head once the
-- batch is settled. The lease then reaches to the new batch's last event
-- and is renewed.
EXECUTE BLOCK (OWNER VARCHAR(100) CHARACTER SET UTF8 = ?, LEASE_MS INTEGER = ?, MAX_ROWS INTEGER = ?,
               STREAM_TABLE VARCHAR(63) CHARACTER SET UTF8 = ?, STREAM_TAG VARCHAR(40) CHARACTER SET ASCII = ?,
               AFTER BIGINT = ?, HOLDING INTEGER = ?, FLOOR_AFTER BIGINT = ?)
RETURNS ({{claimed_outputs}})
AS
{{stream_variables}};
DECLARE LIVE INTEGER = 0;
BEGIN
    IF (EXISTS (SELECT 1 FROM EVENT_SUBSCRIBER s
                WHERE s.TABLE_NAME = :STREAM_TABLE AND s.TAG = :STREAM_TAG AND NOT s.PAUSED
                  AND NOT EXISTS (SELECT 1 FROM EVENT_LEASE l
                                  WHERE l.SUB_ID = s.SUB_ID AND l.HOLDER = :OWNER
                                    AND l.EXPIRES_AT > EVENT_NOW() AND l.LAST_EVENT = :AFTER))) THEN
        EXIT;
    {{stream_subscriptions}}
    DO
        LIVE = LIVE + (SELECT COUNT(*) FROM EVENT_LOG
                       WHERE SUB_ID = :THE_SUB AND DEAD = FALSE AND EVENT_ID > :FLOOR_AFTER AND EVENT_ID <= :AFTER
                       PLAN (EVENT_LOG INDEX (IX_EVENT_LOG_QUEUE)));  -- named: see the claim's walk
    IF (LIVE <> HOLDING) THEN
        EXIT;
    {{stream_stop}}
    {{stream_batch}}
    IF (BATCH_LAST IS NOT NULL) THEN
        {{stream_leases}}
        DO
            UPDATE EVENT_LEASE
            SET LAST_EVENT = :BATCH_LAST, EXPIRES_AT = DATEADD(:LEASE_MS MILLISECOND TO EVENT_NOW())
            WHERE SUB_ID = :THE_SUB AND HOLDER = :OWNER;
END;

-- name: each_id
-- Header of a loop over the ids in IDS (comma-separated), each into ID;
-- the body and its END follow.
IDS = IDS || ',';
WHILE (CHAR_LENGTH(IDS) > 1) DO
BEGIN
    {{next_id}};

-- name: next_id
-- Takes the first id off IDS (which ends with a comma) into ID.
ID = CAST(LEFT(IDS, POSITION(',' IN IDS) - 1) AS BIGINT);
IDS = SUBSTRING(IDS FROM POSITION(',' IN IDS) + 1);

-- name: next_after
-- Takes the first id off AFTERS (which ends with a comma) into AFTER.
AFTER = CAST(LEFT(AFTERS, POSITION(',' IN AFTERS) - 1) AS BIGINT);
AFTERS = SUBSTRING(AFTERS FROM POSITION(',' IN AFTERS) + 1);

-- ack and release_spans act on a batch: IDS is its event (span) ids as one
-- comma-separated parameter (binding a hundred parameters cost the client
-- more than the engine's work).

-- name: ack
EXECUTE BLOCK (IDS VARCHAR(32000) CHARACTER SET ASCII = ?)
RETURNS (DONE INTEGER)
AS
DECLARE ID BIGINT;
BEGIN
    DONE = 0;
    {{each_id}};
        DELETE FROM EVENT_LOG WHERE EVENT_ID = :ID;
        DONE = DONE + ROW_COUNT;
    END
    SUSPEND;
END;

-- name: fail
-- The attempt is counted here (claims count none). DEAD and DEAD_AT are set
-- when it was the last one allowed.
UPDATE EVENT_LOG
SET LAST_ERROR = ?,
    ATTEMPTS = ATTEMPTS + 1,
    NEXT_ATTEMPT_AT = DATEADD(? MILLISECOND TO EVENT_NOW()),
    DEAD_AT = IIF(? = 1, LOCALTIMESTAMP, NULL),
    DEAD = (? = 1)
WHERE EVENT_ID = ?;

-- name: count_attempts
-- Events that a handler process handled (or failed) before it died without
-- reporting them: the attempt happened, so it counts; they are pending
-- again once their claim is given back. At most one job's events, and only
-- when a process dies: bound one by one.
UPDATE EVENT_LOG SET ATTEMPTS = ATTEMPTS + 1 WHERE EVENT_ID IN (?, ...);

-- name: release_lease
-- The ordered batch of a stream (table, tag) is settled: its events that
-- were not handled are pending again.
EXECUTE BLOCK (OWNER VARCHAR(100) CHARACTER SET UTF8 = ?, STREAM_TABLE VARCHAR(63) CHARACTER SET UTF8 = ?,
               STREAM_TAG VARCHAR(40) CHARACTER SET ASCII = ?)
AS
DECLARE THE_SUB INTEGER;
BEGIN
    {{stream_leases}}
    DO
        UPDATE EVENT_LEASE SET HOLDER = NULL, EXPIRES_AT = NULL, FIRST_EVENT = NULL, LAST_EVENT = NULL
        WHERE SUB_ID = :THE_SUB AND HOLDER = :OWNER;
END;

-- name: release_spans
-- The events of these spans (IDS) are settled: handled ones deleted in the
-- same transaction, failed ones waiting for their retry.
EXECUTE BLOCK (HOLDER VARCHAR(100) CHARACTER SET UTF8 = ?, IDS VARCHAR(32000) CHARACTER SET ASCII = ?)
AS
DECLARE ID BIGINT;
BEGIN
    {{each_id}};
        DELETE FROM EVENT_SPAN WHERE SPAN_ID = :ID AND HOLDER = :HOLDER;
    END
END;

-- name: extend_leases
-- The heartbeat: every lease of the holder, spans and streams.
EXECUTE BLOCK (LEASE_MS INTEGER = ?, HOLDER VARCHAR(100) CHARACTER SET UTF8 = ?)
RETURNS (RENEWED INTEGER)
AS
BEGIN
    UPDATE EVENT_SPAN SET EXPIRES_AT = DATEADD(:LEASE_MS MILLISECOND TO EVENT_NOW())
    WHERE HOLDER = :HOLDER;
    RENEWED = ROW_COUNT;
    UPDATE EVENT_LEASE SET EXPIRES_AT = DATEADD(:LEASE_MS MILLISECOND TO EVENT_NOW())
    WHERE HOLDER = :HOLDER AND FIRST_EVENT IS NOT NULL;
    RENEWED = RENEWED + ROW_COUNT;
    SUSPEND;
END;

-- name: fail_abandoned
-- A worker process died and the supervisor saw it: what the worker held
-- fails at once instead of when its lease runs out. The events of its spans
-- and of its ordered batches get the error, and those leases end now: the
-- next claim counts the attempt of the events still in them and hands them
-- out again. Parameter: the worker, the error.
EXECUTE BLOCK (OWNER VARCHAR(100) CHARACTER SET UTF8 = ?, ERROR VARCHAR(2000) CHARACTER SET UTF8 = ?)
RETURNS (EVENTS INTEGER)
AS
DECLARE THE_SUB INTEGER;
DECLARE BATCH_FIRST BIGINT;
DECLARE BATCH_LAST BIGINT;
BEGIN
    EVENTS = 0;
    FOR SELECT SUB_ID, FIRST_EVENT, LAST_EVENT FROM EVENT_SPAN WHERE HOLDER = :OWNER
        UNION ALL
        SELECT SUB_ID, FIRST_EVENT, LAST_EVENT FROM EVENT_LEASE WHERE HOLDER = :OWNER AND FIRST_EVENT IS NOT NULL
        INTO :THE_SUB, :BATCH_FIRST, :BATCH_LAST
    DO
    BEGIN
        UPDATE EVENT_LOG SET LAST_ERROR = :ERROR
        WHERE SUB_ID = :THE_SUB AND DEAD = FALSE AND EVENT_ID BETWEEN :BATCH_FIRST AND :BATCH_LAST;
        EVENTS = EVENTS + ROW_COUNT;
    END
    UPDATE EVENT_SPAN SET EXPIRES_AT = EVENT_NOW() WHERE HOLDER = :OWNER;
    UPDATE EVENT_LEASE SET EXPIRES_AT = EVENT_NOW() WHERE HOLDER = :OWNER;
    SUSPEND;
END;

-- name: subscriptions
SELECT SUB_ID, TRIM(TRAILING FROM TABLE_NAME), ACTION, TRIM(TAG) FROM EVENT_SUBSCRIBER ORDER BY SUB_ID;

-- name: delete_orphans
-- Events whose subscription was purged while a writer's transaction that
-- logged them was still running. It visits the log's subscription ids one by
-- one on the claim index, a probe each: a NOT IN over EVENT_LOG would read
-- the whole log at every listener start (2 s for a million events). ">= n + 1",
-- not "> n": on a compound index "> n" walks every entry of n first.
EXECUTE BLOCK RETURNS (DELETED INTEGER)
AS
DECLARE SUB INTEGER;
BEGIN
    DELETED = 0;
    SUB = (SELECT MIN(SUB_ID) FROM EVENT_LOG);
    WHILE (SUB IS NOT NULL) DO
    BEGIN
        IF (NOT EXISTS (SELECT 1 FROM EVENT_SUBSCRIBER WHERE SUB_ID = :SUB)) THEN
        BEGIN
            DELETE FROM EVENT_LOG WHERE SUB_ID = :SUB;
            DELETED = DELETED + ROW_COUNT;
        END
        SUB = (SELECT MIN(SUB_ID) FROM EVENT_LOG WHERE SUB_ID >= :SUB + 1);
    END
    SUSPEND;
END

-- name: database_id
-- The database's id (EVENT_DATABASE), made by the first claimer that finds
-- none. A claimer making it at the same moment waits for this one and
-- fails on the key; it then reads ours (delivery/claims.py tries again).
EXECUTE BLOCK RETURNS (DATABASE_ID CHAR(36) CHARACTER SET ASCII)
AS
BEGIN
    SELECT DATABASE_ID FROM EVENT_DATABASE INTO DATABASE_ID;
    IF (DATABASE_ID IS NULL) THEN
    BEGIN
        DATABASE_ID = LOWER(UUID_TO_CHAR(GEN_UUID()));
        INSERT INTO EVENT_DATABASE (DATABASE_ID) VALUES (:DATABASE_ID);
    END
    SUSPEND;
END
