-- Schema version 13: DDL on a subscribed table no longer empties its capture
-- trigger first. An attachment that first read the table's triggers while
-- such a DDL transaction was open used the empty trigger (the engine shows
-- it uncommitted metadata) and its changes were not captured, until it
-- reconnected if the DDL was rolled back. The engine checks a dropped
-- column's dependencies at commit, after the AFTER trigger has regenerated
-- the capture trigger, so nothing needs to be emptied; EVENT_CAPTURE_SYNC
-- now changes a trigger only when it differs. Trigger texts do not change.
-- The blocks are frozen copies of sql/capture.sql as it was for version 13.

-- name: sync_procedure
-- Make the table's capture trigger what the generator says now, changing
-- it only when its text or state differs: the engine lets an attachment
-- that first reads the table's triggers while a DDL transaction is open
-- see that transaction's uncommitted trigger, and keeps it even if the DDL
-- is rolled back, so every needless change is a chance to capture with a
-- trigger that never committed. When there is nothing to capture, an empty
-- inactive trigger is left in its place (it depends on no column; `subs
-- remove` drops it). Returns the REASON when nothing is captured.
CREATE OR ALTER PROCEDURE EVENT_CAPTURE_SYNC (TABLE_NAME VARCHAR(63) CHARACTER SET UTF8)
RETURNS (TRIGGER_NAME VARCHAR(63) CHARACTER SET UTF8, REASON VARCHAR(40) CHARACTER SET UTF8)
AS
DECLARE source BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE body BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE owner VARCHAR(63) CHARACTER SET UTF8;
DECLARE nl CHAR(1) CHARACTER SET ASCII = '
';
BEGIN
    SELECT TRIGGER_NAME, SOURCE, REASON FROM EVENT_CAPTURE_SOURCE(:TABLE_NAME)
    INTO TRIGGER_NAME, source, REASON;
    IF (source IS NOT NULL) THEN
    BEGIN
        -- The catalogue keeps a trigger's text from its AS on.
        body = SUBSTRING(source FROM POSITION(nl || 'AS' || nl IN source) + 1);
        IF (NOT EXISTS (SELECT 1 FROM RDB$TRIGGERS
                        WHERE RDB$TRIGGER_NAME = :TRIGGER_NAME AND RDB$RELATION_NAME = :TABLE_NAME
                          AND COALESCE(RDB$TRIGGER_INACTIVE, 0) = 0
                          AND TRIM(RDB$TRIGGER_SOURCE) = TRIM(:body))) THEN
            EXECUTE STATEMENT source;
        -- The trigger writes EVENT_LOG for writers who may not: it gets the
        -- right itself (CREATE OR ALTER keeps it). The table's owner gets
        -- it with the grant option: when the owner's own migration makes a
        -- new trigger (DROP and CREATE TABLE), the owner can pass it on.
        -- Either grant fails quietly for a user who may not give it.
        BEGIN
            EXECUTE STATEMENT 'GRANT INSERT ON EVENT_LOG TO TRIGGER "' || REPLACE(TRIGGER_NAME, '"', '""') || '"';
            WHEN ANY DO
                BEGIN
                END
        END
        SELECT TRIM(RDB$OWNER_NAME) FROM RDB$RELATIONS WHERE RDB$RELATION_NAME = :TABLE_NAME INTO owner;
        IF (owner IS DISTINCT FROM CURRENT_USER) THEN
        BEGIN
            EXECUTE STATEMENT 'GRANT INSERT ON EVENT_LOG TO USER "' || REPLACE(owner, '"', '""')
                || '" WITH GRANT OPTION';
            WHEN ANY DO
                BEGIN
                END
        END
    END
    ELSE IF (REASON <> 'no table') THEN
        EXECUTE STATEMENT 'CREATE OR ALTER TRIGGER "' || REPLACE(TRIGGER_NAME, '"', '""') || '" FOR "'
            || REPLACE(TABLE_NAME, '"', '""') || '" INACTIVE AFTER INSERT POSITION 32000 AS BEGIN END';
    SUSPEND;
END;

-- name: drop_before_ddl_trigger
-- A database trigger's type cannot be altered: it no longer fires before
-- ALTER DOMAIN.
DROP TRIGGER EVENT_CAPTURE_BEFORE_DDL;

-- name: before_ddl_trigger
-- Renaming a column a capture trigger reads is refused by the engine; this
-- says why and what to do instead. Nothing else is done before a DDL
-- statement: the engine checks a dropped column's dependencies at commit,
-- after the AFTER trigger below has regenerated the capture trigger without
-- it, so the capture trigger is never emptied or disabled, not even for a
-- moment another attachment could see (see EVENT_CAPTURE_SYNC).
CREATE OR ALTER TRIGGER EVENT_CAPTURE_BEFORE_DDL
ACTIVE BEFORE ALTER TABLE POSITION 32000
AS
DECLARE table_name VARCHAR(63) CHARACTER SET UTF8;
BEGIN
    table_name = RDB$GET_CONTEXT('DDL_TRIGGER', 'OBJECT_NAME');
    IF (EXISTS (SELECT 1 FROM EVENT_SUBSCRIBER WHERE TABLE_NAME = :table_name)
        AND UPPER(RDB$GET_CONTEXT('DDL_TRIGGER', 'SQL_TEXT')) SIMILAR TO
            '%ALTER[[:SPACE:]]+(COLUMN[[:SPACE:]]+)?("[^"]+"|[^[:SPACE:]"]+)[[:SPACE:]]+TO[[:SPACE:]]+%') THEN
        EXCEPTION EVENT_CAPTURE_REFUSED
            'subs captures table ' || table_name || ' and Firebird cannot rename its columns under a trigger: '
            || 'add the new column, copy the values (UPDATE), then drop the old one';
END;

-- name: grant_ddl_rights
GRANT SELECT ON EVENT_SUBSCRIBER TO TRIGGER EVENT_CAPTURE_BEFORE_DDL;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 13;
END;

-- name: after/drop_stub_procedure
-- Nothing calls it once the blocks above have committed.
DROP PROCEDURE EVENT_CAPTURE_STUB;
