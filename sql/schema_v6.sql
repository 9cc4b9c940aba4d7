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
-- made to reload them (schema.py); version 7 then moves over what the old
-- triggers still wrote, and drops PK_KEY.

-- name: add_row_key
ALTER TABLE EVENT_LOG ADD ROW_KEY VARCHAR(1000) CHARACTER SET UTF8;

-- name: pk_key_nullable
-- From now on only triggers compiled before this version write PK_KEY.
ALTER TABLE EVENT_LOG ALTER PK_KEY DROP NOT NULL;

-- name: record_version
CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER
AS
BEGIN
    RETURN 6;
END;
