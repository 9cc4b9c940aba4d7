-- Claim floors (delivery/floors.py): the event ids below which a
-- subscription has no live event, now or later, so that walks of the claim
-- index start there rather than at the subscription's first entry.

-- name: id_generator
-- The generator that numbers events (EVENT_LOG.EVENT_ID's identity); a
-- listener of its own user reads it with `subs grant`'s USAGE right.
SELECT TRIM(RDB$GENERATOR_NAME) FROM RDB$RELATION_FIELDS
WHERE RDB$RELATION_NAME = 'EVENT_LOG' AND RDB$FIELD_NAME = 'EVENT_ID';

-- name: last_id
-- The last event id handed out, committed or not; read before the
-- transactions below, in the same transaction. {generator} is id_generator's.
SELECT GEN_ID({generator}, 0) FROM RDB$DATABASE;

-- name: next_transaction
-- The id the next transaction to start will get. The first MON$ read of a
-- transaction takes its monitoring snapshot: this one and `transactions`
-- describe one moment, after last_id was read.
SELECT MON$NEXT_TRANSACTION FROM MON$DATABASE;

-- name: transactions
-- Every other active transaction, and whether it has written a row yet (a
-- captured change writes the application's row before its trigger numbers
-- the event).
SELECT t.MON$TRANSACTION_ID, r.MON$RECORD_INSERTS + r.MON$RECORD_UPDATES + r.MON$RECORD_DELETES > 0
FROM MON$TRANSACTIONS t
JOIN MON$RECORD_STATS r ON r.MON$STAT_ID = t.MON$STAT_ID
WHERE t.MON$TRANSACTION_ID <> CURRENT_TRANSACTION;

-- name: first_live
-- Per subscription in IDS, its first live event at or after its entry in
-- FROMS (NULL: none), on the claim index. Run after `transactions`, in a
-- READ COMMITTED transaction: it sees what committed after that snapshot.
EXECUTE BLOCK (IDS VARCHAR(8000) CHARACTER SET ASCII = ?, FROMS VARCHAR(8000) CHARACTER SET ASCII = ?)
RETURNS (SUB_ID INTEGER, FIRST_LIVE BIGINT)
AS
DECLARE ID BIGINT;
DECLARE FROM_ID BIGINT;
BEGIN
    FROMS = FROMS || ',';
    IDS = IDS || ',';
    WHILE (CHAR_LENGTH(IDS) > 1) DO
    BEGIN
        ID = CAST(LEFT(IDS, POSITION(',' IN IDS) - 1) AS BIGINT);
        IDS = SUBSTRING(IDS FROM POSITION(',' IN IDS) + 1);
        FROM_ID = CAST(LEFT(FROMS, POSITION(',' IN FROMS) - 1) AS BIGINT);
        FROMS = SUBSTRING(FROMS FROM POSITION(',' IN FROMS) + 1);
        SUB_ID = ID;
        FIRST_LIVE = NULL;
        SELECT FIRST 1 E.EVENT_ID FROM EVENT_LOG E
        WHERE E.SUB_ID = :ID AND E.DEAD = FALSE AND E.EVENT_ID >= :FROM_ID
        -- Named: for a range of ids the Firebird 3 optimizer reads the log
        -- on the primary key (as in claims.sql's claim).
        PLAN (E ORDER IX_EVENT_LOG_QUEUE)
        ORDER BY E.SUB_ID, E.DEAD, E.EVENT_ID
        INTO :FIRST_LIVE;
        SUSPEND;
    END
END;
