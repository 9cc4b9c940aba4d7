-- Schema version 14: the capture trigger follows the application's DDL at
-- the DDL's commit instead of at the statement. EVENT_CAPTURE_AFTER_DDL
-- regenerated it inside the DDL's transaction, where the engine showed the
-- uncommitted trigger to attachments that read the table's triggers while
-- that transaction was open. After an ADD COLUMN their writes failed
-- ("column ... is not defined") until the DDL committed, and after a
-- rollback until they reconnected; so did writes to the table in the DDL's
-- own transaction. Now the AFTER trigger marks the table and the new commit
-- trigger EVENT_CAPTURE_AT_COMMIT regenerates it. An attachment keeps the
-- database triggers it loaded when it attached: one made before this
-- upgrade goes on with version 13's AFTER trigger, which still may run
-- EVENT_CAPTURE_SYNC. Trigger texts do not change. The blocks are frozen
-- copies of sql/capture.sql as it was for version 14.

-- name: after_ddl_trigger
-- DDL on a subscribed table (or on a domain one of its columns uses) only
-- marks the table; EVENT_CAPTURE_AT_COMMIT regenerates its capture trigger
-- when the DDL's transaction commits. Regenerated here, the new trigger
-- would be seen, uncommitted, by every attachment that reads the table's
-- triggers while the DDL's transaction is open (the engine's metadata
-- reads see uncommitted changes) and by writes in the DDL's own
-- transaction, all of which still write the old shape of the table: a
-- trigger reading a column added by the DDL failed their writes ("column
-- ... is not defined"), and went on failing them after a rollback until
-- they reconnected. A primary key too long to capture is refused here, at
-- the statement. The marks are context variables of the transaction, named
-- by a hash of the table name (a collision only regenerates a trigger that
-- did not need it).
CREATE OR ALTER TRIGGER EVENT_CAPTURE_AFTER_DDL
ACTIVE AFTER CREATE TABLE OR ALTER TABLE OR ALTER DOMAIN POSITION 32000
AS
DECLARE table_name VARCHAR(63) CHARACTER SET UTF8;
DECLARE reason VARCHAR(40) CHARACTER SET UTF8;
BEGIN
    FOR SELECT DISTINCT TRIM(s.TABLE_NAME) FROM EVENT_SUBSCRIBER s
        WHERE (RDB$GET_CONTEXT('DDL_TRIGGER', 'OBJECT_TYPE') = 'TABLE'
               AND s.TABLE_NAME = RDB$GET_CONTEXT('DDL_TRIGGER', 'OBJECT_NAME'))
           OR (RDB$GET_CONTEXT('DDL_TRIGGER', 'OBJECT_TYPE') = 'DOMAIN'
               AND EXISTS (SELECT 1 FROM RDB$RELATION_FIELDS rf
                           WHERE rf.RDB$RELATION_NAME = s.TABLE_NAME
                             AND rf.RDB$FIELD_SOURCE = COALESCE(RDB$GET_CONTEXT('DDL_TRIGGER', 'NEW_OBJECT_NAME'),
                                                                RDB$GET_CONTEXT('DDL_TRIGGER', 'OBJECT_NAME'))))
        INTO table_name
    DO
    BEGIN
        SELECT REASON FROM EVENT_CAPTURE_SOURCE(:table_name) INTO reason;
        IF (reason = 'key too long') THEN
            EXCEPTION EVENT_CAPTURE_REFUSED
                'subs captures table ' || table_name || ' and its new primary key is longer than subs can capture '
                || '(1000 bytes): keep a shorter key, or `subs remove` its subscriptions first';
        RDB$SET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC ' || HASH(table_name), 1);
        RDB$SET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC', 1);
    END
END;

-- name: commit_trigger
-- Regenerates the capture triggers of the tables the committing
-- transaction's DDL marked (EVENT_CAPTURE_AFTER_DDL). The engine runs
-- commit triggers before it applies the transaction's DDL, so the new
-- trigger commits together with the new shape of its table, and the
-- dependencies of a dropped column are checked against it. It runs on
-- COMMIT RETAINING too, and then clears the marks. Every other commit in
-- the database pays one context lookup. It names subs's objects only in
-- dynamic statements: an attachment loads the database's triggers once,
-- and one made while `subs init` installs them loads this one uncommitted;
-- a static reference to EVENT_SUBSCRIBER, not yet committed either, would
-- make every commit of that attachment fail ("column TABLE_NAME is not
-- defined in table EVENT_SUBSCRIBER").
CREATE OR ALTER TRIGGER EVENT_CAPTURE_AT_COMMIT
ACTIVE ON TRANSACTION COMMIT POSITION 32000
AS
DECLARE table_name VARCHAR(63) CHARACTER SET UTF8;
DECLARE reason VARCHAR(40) CHARACTER SET UTF8;
BEGIN
    IF (RDB$GET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC') IS NOT NULL) THEN
    BEGIN
        FOR EXECUTE STATEMENT 'SELECT DISTINCT TRIM(TABLE_NAME) FROM EVENT_SUBSCRIBER'
            WITH CALLER PRIVILEGES
            INTO table_name
        DO
            IF (RDB$GET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC ' || HASH(table_name)) IS NOT NULL) THEN
            BEGIN
                EXECUTE STATEMENT ('SELECT REASON FROM EVENT_CAPTURE_SYNC(?)') (table_name)
                    WITH CALLER PRIVILEGES
                    INTO reason;
                RDB$SET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC ' || HASH(table_name), NULL);
            END
        RDB$SET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC', NULL);
    END
END;

-- name: grant_source_after
GRANT EXECUTE ON PROCEDURE EVENT_CAPTURE_SOURCE TO TRIGGER EVENT_CAPTURE_AFTER_DDL;

-- name: grant_commit_rights
GRANT SELECT ON EVENT_SUBSCRIBER TO TRIGGER EVENT_CAPTURE_AT_COMMIT;

-- name: grant_sync
GRANT EXECUTE ON PROCEDURE EVENT_CAPTURE_SYNC TO TRIGGER EVENT_CAPTURE_AT_COMMIT;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 14;
END;
