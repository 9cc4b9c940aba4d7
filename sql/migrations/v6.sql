-- Schema version 6: events get a narrower key column, ROW_KEY (step 1 of 2).
-- The engine builds, compresses and copies every record at its declared
-- width, not the width of what it holds: PK_KEY VARCHAR(4000) UTF8 was 16 KB
-- of the 17 KB an EVENT_LOG record was declared at. ROW_KEY is
-- VARCHAR(1000): `subs add` refuses keys that can be longer (Firebird's own
-- index key limit keeps UTF8 keys under about 500 characters on 8 KB pages),
-- and `subs init` refuses to upgrade, changing nothing, while such a key is
-- logged or a subscribed table can produce one.
--
-- Why a new name and two versions: the engine refuses to rename or drop a
-- column a trigger names until the trigger's new text has committed, and an
-- attachment that compiled the old trigger keeps writing the column it named
-- (dropping it made such writers fail with "Column has been unexpectedly
-- deleted"). So here the triggers switch to ROW_KEY and every attachment is
-- made to reload them; version 7 then moves over what the old triggers still
-- wrote, and drops PK_KEY. The triggers are switched by editing their text
-- (`subs init` regenerates them with the current generator once every
-- migration has run).

-- name: refuse/long_keys_logged
SELECT FIRST 1 COUNT(*) || ' event(s) in EVENT_LOG have a key longer than 1000 characters, '
       || 'more than this version of subs logs; let the listener handle them (`subs purge` '
       || 'removes dead ones), then run `subs init` again'
FROM EVENT_LOG WHERE CHAR_LENGTH(PK_KEY) > 1000
HAVING COUNT(*) > 0;

-- name: refuse/long_keys_possible
-- The longest key text a table's primary key can be captured as: per column
-- its name, its length prefixes and type letter, and its longest value text.
SELECT FIRST 1 'the primary key of ' || TRIM(S.TABLE_NAME) || ' can be longer than 1000 characters, '
       || 'more than this version of subs logs; `subs remove` its subscriptions, then run `subs init` again'
FROM EVENT_SUBSCRIBER S
JOIN RDB$RELATION_CONSTRAINTS RC ON RC.RDB$RELATION_NAME = S.TABLE_NAME AND RC.RDB$CONSTRAINT_TYPE = 'PRIMARY KEY'
JOIN RDB$INDEX_SEGMENTS SG ON SG.RDB$INDEX_NAME = RC.RDB$INDEX_NAME
JOIN RDB$RELATION_FIELDS RF ON RF.RDB$RELATION_NAME = S.TABLE_NAME AND RF.RDB$FIELD_NAME = SG.RDB$FIELD_NAME
JOIN RDB$FIELDS F ON F.RDB$FIELD_NAME = RF.RDB$FIELD_SOURCE
WHERE S.ACTIVE
GROUP BY S.TABLE_NAME
HAVING SUM(CHAR_LENGTH(TRIM(SG.RDB$FIELD_NAME)) + 10
           + CASE
                 WHEN F.RDB$FIELD_TYPE IN (14, 37) AND F.RDB$CHARACTER_SET_ID = 1 THEN 36
                 WHEN F.RDB$FIELD_TYPE IN (14, 37) THEN F.RDB$CHARACTER_LENGTH
                 WHEN F.RDB$FIELD_TYPE = 28 THEN 80
                 WHEN F.RDB$FIELD_TYPE = 29 THEN 96
                 ELSE 48
             END) > 1000;

-- name: add_row_key
ALTER TABLE EVENT_LOG ADD ROW_KEY VARCHAR(1000) CHARACTER SET UTF8;

-- name: pk_key_nullable
-- From now on only triggers compiled before this version write PK_KEY.
ALTER TABLE EVENT_LOG ALTER PK_KEY DROP NOT NULL;

-- name: retarget_triggers
-- Every capture trigger subs generated up to version 5 inserted
-- "(SUB_ID, PK_KEY, ...": the same statement now fills ROW_KEY.
EXECUTE BLOCK AS
DECLARE TRIGGER_NAME VARCHAR(63) CHARACTER SET UTF8;
DECLARE BODY BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
BEGIN
    FOR SELECT TRIM(RDB$TRIGGER_NAME), RDB$TRIGGER_SOURCE FROM RDB$TRIGGERS
        WHERE RDB$TRIGGER_NAME STARTING WITH 'SUBS$'
          AND RDB$TRIGGER_SOURCE CONTAINING 'INSERT INTO EVENT_LOG (SUB_ID, PK_KEY,'
        INTO :TRIGGER_NAME, :BODY
    DO
        EXECUTE STATEMENT 'ALTER TRIGGER "' || REPLACE(TRIGGER_NAME, '"', '""') || '" '
            || REPLACE(BODY, 'INSERT INTO EVENT_LOG (SUB_ID, PK_KEY,', 'INSERT INTO EVENT_LOG (SUB_ID, ROW_KEY,');
END;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 6;
END;

-- name: after/settle_triggers
-- A metadata change that changes nothing, made once the new trigger texts
-- have committed: under SuperClassic an attachment that reloaded a table's
-- triggers while that commit ran can keep the old ones until the next change.
EXECUTE BLOCK AS
DECLARE TRIGGER_NAME VARCHAR(63) CHARACTER SET UTF8;
BEGIN
    FOR SELECT TRIM(RDB$TRIGGER_NAME) FROM RDB$TRIGGERS
        WHERE RDB$TRIGGER_NAME STARTING WITH 'SUBS$' AND RDB$TRIGGER_INACTIVE = 0
        INTO :TRIGGER_NAME
    DO
        EXECUTE STATEMENT 'ALTER TRIGGER "' || REPLACE(TRIGGER_NAME, '"', '""') || '" POSITION 32000';
END;
