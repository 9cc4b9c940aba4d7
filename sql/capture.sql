-- The capture trigger's generator, and the database triggers that keep every
-- subscribed table's capture trigger in step with the table through the
-- application's own DDL. The generator lives in the database because DDL
-- must regenerate the trigger inside the DDL's own transaction, as it
-- commits: a change written right after an ALTER TABLE commits is captured
-- with the new shape.
-- A fresh install runs these blocks after schema.sql's (schema/upgrade.py);
-- migrations keep frozen copies.
--
-- Captured rows (PK_ROW, OLD_ROW, NEW_ROW) are bytes:
--     '~' then, per column: <n>:<name> <n>:<type> then '-' (NULL),
--     <n>:<value>, =<value>; or ><n>:
-- <n> counts bytes, so nothing needs escaping and any byte can be carried.
-- '><n>:' (row images built by concatenation, Firebird 3 and 4.0.0-4.0.1,
-- since version 26) is a BLOB's value of <n> bytes that follows the last
-- column's part and a '^', after the values of the BLOBs before it.
-- Types: i integer, N exact decimal (NUMERIC, DECIMAL, INT128, DECFLOAT),
-- f binary float as <integer>p<exponent>, or as the 17 significant digits
-- that give it back (OLD_ROW and NEW_ROW on Firebird 4 and later), or nan,
-- inf, -inf, 0, -0, b boolean, D date, T time, S timestamp, z/Z time/
-- timestamp with time zone, x bytes (OCTETS, binary BLOB), s<charset> text
-- as its stored bytes. Since version 18, OLD_ROW and NEW_ROW write the
-- values of the types before x, whose text never holds a ';', as
-- =<value>; (a counted value costs its expression twice). PK_ROW keeps the
-- counted form: KEY_HASH and keys.sql depend on its bytes. ARRAY and
-- COMPUTED BY columns are left out. capture/values.py reads it back.

-- name: source_procedure
-- The trigger name and CREATE OR ALTER TRIGGER text for a table's active
-- subscriptions; SOURCE is NULL and REASON says why when there is nothing
-- to capture: 'no table', 'no subscription'. REASON 'no primary key' or
-- 'key too long' comes with a SOURCE that captures every change with an
-- empty key: a migration that drops a subscribed table's primary key and
-- adds another in a later transaction loses no change in between, and
-- none is refused for its new key's length. INSERT_KEY and INSERT_ROW are
-- the expressions an insert's key and row are captured with (over NEW),
-- for the backfill generator below; set only when the table is captured
-- with its primary key.
CREATE OR ALTER PROCEDURE EVENT_CAPTURE_SOURCE (TABLE_NAME VARCHAR(63) CHARACTER SET UTF8)
RETURNS (
    TRIGGER_NAME VARCHAR(63) CHARACTER SET UTF8,
    SOURCE BLOB SUB_TYPE TEXT CHARACTER SET UTF8,
    REASON VARCHAR(40) CHARACTER SET UTF8,
    INSERT_KEY BLOB SUB_TYPE TEXT CHARACTER SET UTF8,
    INSERT_ROW BLOB SUB_TYPE TEXT CHARACTER SET UTF8
)
AS
DECLARE head VARCHAR(80) CHARACTER SET UTF8;
DECLARE suffix VARCHAR(20) CHARACTER SET UTF8;
DECLARE max_chars INTEGER;
DECLARE max_bytes INTEGER;
-- The text of an error caught in PSQL (RDB$ERROR came with Firebird 4).
DECLARE caught_error VARCHAR(60) CHARACTER SET UTF8;
DECLARE key_old BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE key_new BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE old_expr BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE new_expr BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE key_bytes INTEGER = 1;
DECLARE row_bytes INTEGER = 1;
DECLARE has_blob BOOLEAN = FALSE;
DECLARE decimal_floats BOOLEAN = TRUE;
DECLARE blob_append BOOLEAN = TRUE;
-- How row images are assembled ('v', 'a' or 'c': see below); the bytes
-- of the current VARCHAR run and of a column's part in it; the current
-- BLOB_APPEND's arguments; what goes before a column's part, and what
-- closes an image. In 'c', the BLOB values that follow an image: the
-- trigger's statements that append each one that is not NULL, and the
-- same as an expression (INSERT_ROW).
DECLARE assembly CHAR(1) CHARACTER SET ASCII;
DECLARE run_bytes INTEGER = 1;
DECLARE run_piece INTEGER;
DECLARE arguments INTEGER = 2;
DECLARE opening VARCHAR(80) CHARACTER SET ASCII;
DECLARE closing VARCHAR(100) CHARACTER SET ASCII;
DECLARE old_appends BLOB SUB_TYPE TEXT CHARACTER SET UTF8 = '';
DECLARE new_appends BLOB SUB_TYPE TEXT CHARACTER SET UTF8 = '';
DECLARE inserted_blobs BLOB SUB_TYPE TEXT CHARACTER SET UTF8 = '';
DECLARE column_ref VARCHAR(130) CHARACTER SET UTF8;
DECLARE column_name VARCHAR(63) CHARACTER SET UTF8;
DECLARE field_type SMALLINT;
DECLARE sub_type SMALLINT;
DECLARE field_scale SMALLINT;
DECLARE field_length INTEGER;
DECLARE charset_name VARCHAR(63) CHARACTER SET UTF8;
DECLARE in_key BOOLEAN;
DECLARE type_code VARCHAR(70) CHARACTER SET UTF8;
DECLARE value_bytes INTEGER;
DECLARE header VARCHAR(400) CHARACTER SET UTF8;
DECLARE header_literal VARCHAR(3210) CHARACTER SET ASCII;
-- Each column's fragments gather in these before they join the BLOBs, a few
-- KB at a time: appending to a BLOB copies it, so one append per column
-- made the generator quadratic (5.5 s for 800 columns, in the commit of
-- every ALTER TABLE of such a table).
DECLARE old_fragment VARCHAR(4500) CHARACTER SET UTF8;
DECLARE new_fragment VARCHAR(4500) CHARACTER SET UTF8;
DECLARE old_part VARCHAR(8000) CHARACTER SET UTF8 = '';
DECLARE new_part VARCHAR(8000) CHARACTER SET UTF8 = '';
DECLARE action CHAR(1) CHARACTER SET ASCII;
DECLARE actions VARCHAR(3) CHARACTER SET ASCII;
DECLARE sub_id INTEGER;
DECLARE tag VARCHAR(40) CHARACTER SET ASCII;
DECLARE watch_columns VARCHAR(4000) CHARACTER SET UTF8;
DECLARE when_condition VARCHAR(4000) CHARACTER SET UTF8;
DECLARE condition BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE changed BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE declarations BLOB SUB_TYPE TEXT CHARACTER SET UTF8 = '';
DECLARE checks BLOB SUB_TYPE TEXT CHARACTER SET UTF8 = '';
DECLARE body BLOB SUB_TYPE TEXT CHARACTER SET UTF8 = '';
DECLARE block BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE logs BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE capture BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE any_match BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE gate BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE matching BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE subscriptions INTEGER;
DECLARE gated BOOLEAN = FALSE;
DECLARE pad VARCHAR(8) CHARACTER SET ASCII;
DECLARE conditional INTEGER;
DECLARE events VARCHAR(40) CHARACTER SET ASCII;
DECLARE key_hash VARCHAR(400) CHARACTER SET UTF8;
DECLARE post VARCHAR(400) CHARACTER SET ASCII;
DECLARE log_piece VARCHAR(2000) CHARACTER SET UTF8;
DECLARE declared VARCHAR(200) CHARACTER SET ASCII;
-- The per-subscription texts gather in these before they join the BLOBs
-- (block, logs, declarations) a few KB at a time, as the columns' do above:
-- appending each to its BLOB made generating the trigger of 100 subscriptions
-- take 6 s, in `subs add` and in the commit of the table's every ALTER.
DECLARE block_part VARCHAR(8000) CHARACTER SET UTF8;
DECLARE logs_part VARCHAR(8000) CHARACTER SET UTF8;
DECLARE declarations_part VARCHAR(8000) CHARACTER SET UTF8 = '';
DECLARE log_statements INTEGER;
DECLARE shared_log BOOLEAN;
-- When a change was captured, in subs's time zone (EVENT_TIME_ZONE): the
-- expression, what the trigger's inserts write (its variable captured_at,
-- set once per row), and what they add for CREATED_AT, in the trigger and
-- in its log_event.
DECLARE stamp VARCHAR(700) CHARACTER SET UTF8 = 'LOCALTIMESTAMP';
DECLARE logged_at VARCHAR(20) CHARACTER SET ASCII = 'LOCALTIMESTAMP';
DECLARE created_column VARCHAR(20) CHARACTER SET ASCII = '';
DECLARE created_value VARCHAR(20) CHARACTER SET ASCII = '';
DECLARE log_created_value VARCHAR(710) CHARACTER SET UTF8 = '';
DECLARE zone VARCHAR(63) CHARACTER SET UTF8;
DECLARE zone_known INTEGER;
DECLARE nl CHAR(1) CHARACTER SET ASCII = '
';

DECLARE FUNCTION q (name VARCHAR(63) CHARACTER SET UTF8) RETURNS VARCHAR(130) CHARACTER SET UTF8
AS
BEGIN
    RETURN '"' || REPLACE(name, '"', '""') || '"';
END

-- TEXT as a literal of its UTF-8 bytes, whatever the character set of the
-- attachment that compiles the trigger: the application's DDL regenerates
-- it in the application's attachment, where a quoted literal takes that
-- attachment's character set (in WIN1252 'STRAßE' would be 6 bytes, not
-- the 7 its header counts, and HASH would see other bytes). Text beyond
-- ASCII is written as hex, x'...'; ASCII text as itself.
DECLARE FUNCTION lit (text VARCHAR(400) CHARACTER SET UTF8) RETURNS VARCHAR(3210) CHARACTER SET ASCII
AS
DECLARE bytes VARCHAR(1600) CHARACTER SET OCTETS;
DECLARE hex VARCHAR(3200) CHARACTER SET ASCII = '';
DECLARE digits CHAR(16) CHARACTER SET ASCII = '0123456789ABCDEF';
DECLARE at_byte INTEGER = 1;
DECLARE code INTEGER;
BEGIN
    IF (OCTET_LENGTH(text) = CHAR_LENGTH(text)) THEN
        RETURN '''' || REPLACE(text, '''', '''''') || '''';
    bytes = CAST(text AS VARCHAR(1600) CHARACTER SET OCTETS);
    WHILE (at_byte <= OCTET_LENGTH(bytes)) DO
    BEGIN
        code = ASCII_VAL(SUBSTRING(bytes FROM at_byte FOR 1));
        hex = hex || SUBSTRING(digits FROM BIN_SHR(code, 4) + 1 FOR 1)
            || SUBSTRING(digits FROM BIN_AND(code, 15) + 1 FOR 1);
        at_byte = at_byte + 1;
    END
    RETURN 'x''' || hex || '''';
END

-- CONDITION (a --when condition) with its quoted literals written as hex
-- of their UTF-8 bytes, _UTF8 x'...', for lit's reason: the application's
-- DDL compiles the trigger in its own attachment, where a quoted literal
-- takes that attachment's character set. In WIN1252 a literal holding Ł
-- failed the DDL ("Cannot transliterate character between character
-- sets"), and NEW.CITY <> 'plain' raised for every row whose CITY held a
-- character WIN1252 lacks, so its changes were logged dead. A literal with
-- an introducer (_WIN1250 '...') keeps it and becomes x'...': the engine
-- stores such a literal as hex in the trigger's source itself, so the text
-- as written looked stale to drift checks. A q'<d>...<d>' literal is one
-- too (until version 22 it was kept as written). The text is read as
-- check_condition in capture/names.py reads it ('...' and "..." with their
-- quotes doubled inside, q'...' as the engine reads it). Identifiers, and
-- literals of DATE, TIME and TIMESTAMP or with another prefix (x'...'),
-- stay as written.
-- (Firebird 3 sub-functions cannot call each other: this one stands alone.)
DECLARE FUNCTION portable (condition VARCHAR(4000) CHARACTER SET UTF8)
RETURNS BLOB SUB_TYPE TEXT CHARACTER SET UTF8
AS
DECLARE result BLOB SUB_TYPE TEXT CHARACTER SET UTF8 = '';
DECLARE at_char INTEGER = 1;
DECLARE quote_at INTEGER;
DECLARE start_at INTEGER;  -- the literal's first character: its quote, or the q of q'...'
DECLARE other_at INTEGER;
DECLARE end_at INTEGER;
DECLARE quote_char CHAR(1) CHARACTER SET UTF8;
DECLARE delimiter CHAR(1) CHARACTER SET UTF8;
DECLARE before VARCHAR(80) CHARACTER SET UTF8;
DECLARE kind CHAR(1) CHARACTER SET ASCII;  -- i introduced, k kept as written, u _UTF8 to add
DECLARE alternative BOOLEAN;  -- q'<d>...<d>'
DECLARE literal VARCHAR(4000) CHARACTER SET UTF8;
DECLARE bytes VARCHAR(16000) CHARACTER SET OCTETS;
DECLARE hex VARCHAR(32000) CHARACTER SET ASCII;
DECLARE digits CHAR(16) CHARACTER SET ASCII = '0123456789ABCDEF';
DECLARE at_byte INTEGER;
DECLARE code INTEGER;
BEGIN
    IF (POSITION('''' IN condition) = 0) THEN
        RETURN condition;
    WHILE (at_char <= CHAR_LENGTH(condition)) DO
    BEGIN
        quote_at = POSITION('''', condition, at_char);
        other_at = POSITION('"', condition, at_char);
        IF (quote_at = 0 OR (other_at > 0 AND other_at < quote_at)) THEN
            quote_at = other_at;
        IF (quote_at = 0) THEN
        BEGIN
            result = result || SUBSTRING(condition FROM at_char);
            LEAVE;
        END
        quote_char = SUBSTRING(condition FROM quote_at FOR 1);
        -- A q right before a quote starts a q'...' literal unless it ends a word.
        alternative = quote_char = '''' AND quote_at > 1
            AND UPPER(SUBSTRING(condition FROM quote_at - 1 FOR 1)) = 'Q'
            AND (quote_at = 2 OR UPPER(SUBSTRING(condition FROM quote_at - 2 FOR 1)) NOT SIMILAR TO '[A-Z0-9_$]');
        start_at = quote_at - IIF(alternative, 1, 0);
        result = result || SUBSTRING(condition FROM at_char FOR start_at - at_char);
        -- The characters before the literal say whether it has a prefix: the
        -- last 80 of them, as matching all of them made Firebird 3 take 10 s
        -- over a condition of 500 literals.
        before = UPPER(SUBSTRING(condition FROM MAXVALUE(1, start_at - 80) FOR MINVALUE(80, start_at - 1)));
        kind = CASE
            WHEN quote_char = '"' THEN 'k'
            WHEN before SIMILAR TO '(%[^A-Z0-9_$])?\_[A-Z0-9_$]+[[:WHITESPACE:]]*' ESCAPE '\' THEN 'i'
            WHEN before SIMILAR TO '%[A-Z0-9_$]' THEN 'k'
            WHEN before SIMILAR TO '(%[^A-Z0-9_$])?(DATE|TIME|TIMESTAMP)[[:WHITESPACE:]]+' THEN 'k'
            ELSE 'u'
        END;
        IF (alternative) THEN
        BEGIN
            -- q'<d>...<d>': it ends at its delimiter's pair and a quote.
            delimiter = SUBSTRING(condition FROM quote_at + 1 FOR 1);
            delimiter = DECODE(delimiter, '(', ')', '[', ']', '{', '}', '<', '>', delimiter);
            end_at = POSITION(delimiter || '''', condition, quote_at + 2);
            end_at = IIF(end_at = 0, CHAR_LENGTH(condition), end_at + 1);
        END
        ELSE
        BEGIN
            end_at = quote_at;
            WHILE (TRUE) DO
            BEGIN
                end_at = POSITION(quote_char, condition, end_at + 1);
                IF (end_at = 0) THEN
                BEGIN
                    end_at = CHAR_LENGTH(condition);
                    LEAVE;
                END
                IF (SUBSTRING(condition FROM end_at + 1 FOR 1) IS DISTINCT FROM quote_char) THEN
                    LEAVE;
                end_at = end_at + 1;
            END
        END
        literal = SUBSTRING(condition FROM start_at FOR end_at - start_at + 1);
        IF (kind = 'k') THEN
            result = result || literal;
        ELSE
        BEGIN
            IF (alternative) THEN
                bytes = CAST(SUBSTRING(literal FROM 4 FOR CHAR_LENGTH(literal) - 5) AS VARCHAR(16000) CHARACTER SET OCTETS);
            ELSE
                bytes = CAST(REPLACE(SUBSTRING(literal FROM 2 FOR CHAR_LENGTH(literal) - 2), '''''', '''')
                             AS VARCHAR(16000) CHARACTER SET OCTETS);
            hex = '';
            at_byte = 1;
            WHILE (at_byte <= OCTET_LENGTH(bytes)) DO
            BEGIN
                code = ASCII_VAL(SUBSTRING(bytes FROM at_byte FOR 1));
                hex = hex || SUBSTRING(digits FROM BIN_SHR(code, 4) + 1 FOR 1)
                    || SUBSTRING(digits FROM BIN_AND(code, 15) + 1 FOR 1);
                at_byte = at_byte + 1;
            END
            -- (Not one IIF: its result would be a CHAR, padded.)
            IF (kind = 'u') THEN
                result = result || '_UTF8 ';
            ELSE IF (before NOT SIMILAR TO '%[[:WHITESPACE:]]') THEN
                result = result || ' ';
            result = result || 'x''' || hex || '''';
        END
        at_char = end_at + 1;
    END
    RETURN result;
END

DECLARE FUNCTION counted (text VARCHAR(200) CHARACTER SET UTF8) RETURNS VARCHAR(220) CHARACTER SET UTF8
AS
BEGIN
    RETURN OCTET_LENGTH(text) || ':' || text;
END

-- A column's type code (see the top of this file); NULL for a type that
-- is not captured.
DECLARE FUNCTION type_code_of (field_type SMALLINT, sub_type SMALLINT, field_scale SMALLINT,
                               charset_name VARCHAR(63) CHARACTER SET UTF8)
RETURNS VARCHAR(70) CHARACTER SET UTF8
AS
BEGIN
    RETURN CASE
        WHEN field_type IN (7, 8, 16) AND sub_type = 0 AND field_scale = 0 THEN 'i'
        WHEN field_type IN (7, 8, 16, 26, 24, 25) THEN 'N'
        WHEN field_type IN (10, 27) THEN 'f'
        WHEN field_type = 23 THEN 'b'
        WHEN field_type = 12 THEN 'D'
        WHEN field_type = 13 THEN 'T'
        WHEN field_type = 35 THEN 'S'
        WHEN field_type = 28 THEN 'z'
        WHEN field_type = 29 THEN 'Z'
        WHEN field_type IN (14, 37) AND charset_name = 'OCTETS' THEN 'x'
        WHEN field_type IN (14, 37) THEN 's' || charset_name
        WHEN field_type = 261 AND sub_type = 1 THEN 's' || COALESCE(charset_name, 'NONE')
        WHEN field_type = 261 THEN 'x'
    END;
END

-- One column's part of a captured row, for context NEW or OLD: its header
-- (name and type), then '-' or its value: counted in keys and for text and
-- bytes, delimited elsewhere in row images, where floats take the decimal
-- form when the engine has DECFLOAT (DECIMAL_FLOATS). ASSEMBLY says what
-- the part goes into: 'k' a key, 'v' a row image built as a VARCHAR, 'a'
-- one built with BLOB_APPEND, 'c' one built by BLOB concatenation (see
-- EVENT_CAPTURE_SOURCE). In the last two a BLOB's value is not part of the
-- column's VARCHAR run: with BLOB_APPEND it joins the image on its own
-- right after the run (which its part closes); in a concatenation the
-- part is '>' and the value's length, and the value follows the image's
-- '^' (EVENT_CAPTURE_SOURCE appends it).
-- (Firebird 3 sub-functions cannot call each other: this one stands alone.)
DECLARE FUNCTION fragment (context VARCHAR(3) CHARACTER SET ASCII, column_name VARCHAR(63) CHARACTER SET UTF8,
                           header_literal VARCHAR(3210) CHARACTER SET ASCII, type_code VARCHAR(70) CHARACTER SET UTF8,
                           field_length INTEGER, assembly CHAR(1) CHARACTER SET ASCII, decimal_floats BOOLEAN)
RETURNS VARCHAR(4500) CHARACTER SET UTF8
AS
DECLARE ref VARCHAR(140) CHARACTER SET UTF8;
DECLARE shift VARCHAR(200) CHARACTER SET UTF8;
DECLARE finite VARCHAR(1000) CHARACTER SET UTF8;
DECLARE value_expr VARCHAR(2000) CHARACTER SET UTF8;
DECLARE prefix VARCHAR(1000) CHARACTER SET UTF8;
BEGIN
    ref = context || '."' || REPLACE(column_name, '"', '""') || '"';
    IF (type_code = 'f') THEN
    BEGIN
        -- value = m * 2^shift exactly: with the shift 60 below the value's
        -- binary exponent (LOG may miss it by one either way), m is an
        -- integer of 59 to 62 bits. The engine's cast of a DOUBLE to BIGINT
        -- is one off for every integer in [2^52, 2^53): m stays above.
        -- Below 1e-290 (subnormals and near) 2^shift would underflow: the
        -- value is scaled by 2^200 first (exact) and the divisor with it.
        -- DECFLOAT(34) takes a float through its 17 significant digits
        -- (printf's %.16e, correctly rounded), which give the same float
        -- back, for half the cost.
        -- NaN, the infinities (LOG of one raises) and zeros (with their
        -- sign: ATAN2(-0, -1) is -pi) come first, and only comparisons
        -- touch them: arithmetic on an infinity raises. NaN is the one value
        -- unequal to itself (how it compares with numbers varies), so first.
        shift = 'CAST(FLOOR(LOG(2, ABS(' || ref || '))) - 60 AS INTEGER)';
        finite = 'CAST(CAST(IIF(ABS(' || ref || ') < 1e-290, ' || ref || ' * POWER(2, 200) / POWER(2, ' || shift
            || ' + 200), ' || ref || ' / POWER(2, ' || shift || ')) AS BIGINT) AS VARCHAR(21)) || ''p'' || ' || shift;
        IF (assembly <> 'k' AND decimal_floats) THEN
            finite = 'CAST(CAST(' || ref || ' AS DECFLOAT(34)) AS VARCHAR(60) CHARACTER SET OCTETS)';
        value_expr = 'CASE WHEN ' || ref || ' <> ' || ref || ' THEN ''nan'''
            || ' WHEN ' || ref || ' > 1.7976931348623157e308 THEN ''inf'''
            || ' WHEN ' || ref || ' < -1.7976931348623157e308 THEN ''-inf'''
            || ' WHEN ' || ref || ' = 0 THEN IIF(ATAN2(' || ref || ', -1) < 0, ''-0'', ''0'')'
            || ' ELSE ' || finite || ' END';
    END
    ELSE IF (type_code = 'x') THEN
        value_expr = ref;
    ELSE IF (field_length IS NULL) THEN
        value_expr = 'CAST(' || ref || ' AS BLOB SUB_TYPE BINARY)';
    ELSE
        value_expr = 'CAST(' || ref || ' AS VARCHAR(' || field_length || ') CHARACTER SET OCTETS)';
    prefix = ASCII_CHAR(10) || '                || ' || header_literal || ' || IIF(' || ref
        || ' IS NULL, ''-'', ';
    IF (assembly = 'a' AND field_length IS NULL) THEN
        RETURN prefix || 'OCTET_LENGTH(' || ref || ') || '':''), ' || ref || ', ''''';
    IF (assembly = 'c' AND field_length IS NULL) THEN
        RETURN prefix || '''>'' || OCTET_LENGTH(' || ref || ') || '':'')';
    IF (assembly <> 'k' AND type_code <> 'x' AND type_code NOT STARTING WITH 's') THEN
        RETURN prefix || '''='' || ' || value_expr || ' || '';'')';
    RETURN prefix || 'OCTET_LENGTH(' || value_expr || ') || '':'' || ' || value_expr || ')';
END

BEGIN
    IF (RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION') STARTING WITH '3.') THEN
    BEGIN
        max_chars = 31;
        max_bytes = 31;
        decimal_floats = FALSE;
        blob_append = FALSE;
        caught_error = '''SQLSTATE '' || SQLSTATE || '', GDSCODE '' || GDSCODE';
    END
    ELSE
    BEGIN
        max_chars = 63;
        max_bytes = 252;
        caught_error = 'RDB$ERROR(MESSAGE)';
        blob_append = RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION') NOT IN ('4.0.0', '4.0.1');
    END
    zone = EVENT_TIME_ZONE();
    -- A zone this engine's time zone data lacks (the database restored on
    -- an engine with older data, which knows no Europe/Kyiv) compiles, then
    -- fails every write from another zone: such a trigger stamps as on
    -- Firebird 3.
    IF (zone IS NOT NULL) THEN
    BEGIN
        EXECUTE STATEMENT 'SELECT 1 FROM RDB$DATABASE WHERE CURRENT_TIMESTAMP AT TIME ZONE ' || lit(zone) || ' IS NOT NULL'
            INTO zone_known;
        WHEN ANY DO
            zone = NULL;
    END
    IF (zone IS NOT NULL) THEN
    BEGIN
        -- A writer in subs's zone takes LOCALTIMESTAMP (its own test costs
        -- about 1 µs); another, its local time moved by the difference of
        -- the two zones' offsets now (3.5 µs: a cast of a time with zone to
        -- one without takes the session's zone, so AT TIME ZONE alone does
        -- not do it).
        stamp = 'IIF(RDB$GET_CONTEXT(''SYSTEM'', ''SESSION_TIMEZONE'') = ' || lit(zone) || ', LOCALTIMESTAMP, '
            || 'DATEADD(MINUTE, 60 * (EXTRACT(TIMEZONE_HOUR FROM CURRENT_TIMESTAMP AT TIME ZONE ' || lit(zone)
            || ') - EXTRACT(TIMEZONE_HOUR FROM CURRENT_TIMESTAMP)) + EXTRACT(TIMEZONE_MINUTE FROM CURRENT_TIMESTAMP '
            || 'AT TIME ZONE ' || lit(zone) || ') - EXTRACT(TIMEZONE_MINUTE FROM CURRENT_TIMESTAMP), LOCALTIMESTAMP))';
        logged_at = ':captured_at';
        created_column = ', CREATED_AT';
        created_value = ', :captured_at';
        log_created_value = ', ' || stamp;
    END
    SELECT FIRST 1 TRIM(TRAILING FROM RDB$TRIGGER_NAME) FROM RDB$TRIGGERS
    WHERE RDB$RELATION_NAME = :TABLE_NAME AND RDB$TRIGGER_NAME STARTING WITH 'SUBS$'
    ORDER BY RDB$TRIGGER_NAME
    INTO TRIGGER_NAME;
    IF (TRIGGER_NAME IS NULL) THEN
    BEGIN
        -- SUBS$<table>, shortened with a hash when the engine's limit requires.
        head = 'SUBS$' || TABLE_NAME;
        suffix = '';
        IF (CHAR_LENGTH(head) > max_chars OR OCTET_LENGTH(head) > max_bytes) THEN
            suffix = '$' || LPAD(MOD(ABS(HASH(TABLE_NAME)), 100000000), 8, '0');
        WHILE (CHAR_LENGTH(head || suffix) > max_chars OR OCTET_LENGTH(head || suffix) > max_bytes) DO
            head = LEFT(head, CHAR_LENGTH(head) - 1);
        TRIGGER_NAME = head || suffix;
    END

    IF (NOT EXISTS (SELECT 1 FROM RDB$RELATIONS WHERE RDB$RELATION_NAME = :TABLE_NAME)) THEN
    BEGIN
        REASON = 'no table';
        SUSPEND;
        EXIT;
    END
    IF (NOT EXISTS (SELECT 1 FROM RDB$RELATION_CONSTRAINTS
                    WHERE RDB$RELATION_NAME = :TABLE_NAME AND RDB$CONSTRAINT_TYPE = 'PRIMARY KEY')) THEN
        REASON = 'no primary key';

    -- How the row images are assembled, which their columns' parts depend
    -- on: as a VARCHAR when no column is a BLOB and the image fits in one
    -- ('v'); else as a BLOB, and every concatenation of a BLOB copies it
    -- (W13: an update of rows with two 200 KB BLOBs cost 53 ms a row and
    -- left 2.7 times the events' bytes in temporary BLOBs when each
    -- column's part was concatenated in turn).
    -- BLOB_APPEND (Firebird 4.0.2 and later) appends in place ('a').
    -- Elsewhere the parts go in runs that each fit a VARCHAR, the BLOB
    -- values after all of them ('c'): each concatenation copies the image
    -- so far, so a BLOB value between two runs was copied again by every
    -- concatenation after it (Firebird 3: an update of rows with two 200 KB
    -- BLOBs left 1.95 times the events' bytes). Such an image starts as a
    -- VARCHAR when its runs fit in one, so only its BLOB values are copied,
    -- and the trigger appends each that is not NULL in a statement of its own.
    FOR SELECT TRIM(TRAILING FROM rf.RDB$FIELD_NAME), f.RDB$FIELD_TYPE, COALESCE(f.RDB$FIELD_SUB_TYPE, 0),
               COALESCE(f.RDB$FIELD_SCALE, 0), f.RDB$FIELD_LENGTH, TRIM(cs.RDB$CHARACTER_SET_NAME)
        FROM RDB$RELATION_FIELDS rf
        JOIN RDB$FIELDS f ON f.RDB$FIELD_NAME = rf.RDB$FIELD_SOURCE
        LEFT JOIN RDB$CHARACTER_SETS cs ON cs.RDB$CHARACTER_SET_ID = f.RDB$CHARACTER_SET_ID
        WHERE rf.RDB$RELATION_NAME = :TABLE_NAME
          AND f.RDB$DIMENSIONS IS NULL
          AND f.RDB$COMPUTED_BLR IS NULL
        INTO column_name, field_type, sub_type, field_scale, field_length, charset_name
    DO
    BEGIN
        type_code = type_code_of(field_type, sub_type, field_scale, charset_name);
        IF (type_code IS NOT NULL) THEN
            row_bytes = row_bytes + OCTET_LENGTH(counted(column_name) || counted(type_code)) + 12
                + IIF(field_type IN (14, 37), field_length, 80);
        IF (field_type = 261) THEN
            has_blob = TRUE;
    END
    IF (NOT has_blob AND row_bytes <= 32000) THEN
    BEGIN
        assembly = 'v';
        old_expr = '''~''';
        closing = '';
    END
    ELSE IF (blob_append) THEN
    BEGIN
        assembly = 'a';
        old_expr = 'BLOB_APPEND(CAST(''~'' AS VARCHAR(1) CHARACTER SET OCTETS), ''''';
        closing = ')';
    END
    ELSE
    BEGIN
        assembly = 'c';
        old_expr = IIF(row_bytes <= 32000, '(CAST(''~'' AS VARCHAR(1) CHARACTER SET OCTETS) || ''''',
                       'CAST(''~'' AS BLOB SUB_TYPE BINARY) || (''''');
        closing = ' || ''^'')';
    END
    new_expr = old_expr;
    key_old = '''~''';
    key_new = '''~''';
    FOR SELECT TRIM(TRAILING FROM rf.RDB$FIELD_NAME), f.RDB$FIELD_TYPE, COALESCE(f.RDB$FIELD_SUB_TYPE, 0),
               COALESCE(f.RDB$FIELD_SCALE, 0), f.RDB$FIELD_LENGTH, TRIM(cs.RDB$CHARACTER_SET_NAME),
               EXISTS (SELECT 1 FROM RDB$RELATION_CONSTRAINTS rc
                       JOIN RDB$INDEX_SEGMENTS s ON s.RDB$INDEX_NAME = rc.RDB$INDEX_NAME
                       WHERE rc.RDB$RELATION_NAME = rf.RDB$RELATION_NAME
                         AND rc.RDB$CONSTRAINT_TYPE = 'PRIMARY KEY'
                         AND s.RDB$FIELD_NAME = rf.RDB$FIELD_NAME)
        FROM RDB$RELATION_FIELDS rf
        JOIN RDB$FIELDS f ON f.RDB$FIELD_NAME = rf.RDB$FIELD_SOURCE
        LEFT JOIN RDB$CHARACTER_SETS cs ON cs.RDB$CHARACTER_SET_ID = f.RDB$CHARACTER_SET_ID
        WHERE rf.RDB$RELATION_NAME = :TABLE_NAME
          AND f.RDB$DIMENSIONS IS NULL
          AND f.RDB$COMPUTED_BLR IS NULL
        ORDER BY rf.RDB$FIELD_POSITION
        INTO column_name, field_type, sub_type, field_scale, field_length, charset_name, in_key
    DO
    BEGIN
        type_code = type_code_of(field_type, sub_type, field_scale, charset_name);
        -- Fixed-format values are ASCII text of at most 80 bytes.
        value_bytes = IIF(field_type IN (14, 37), field_length, 80);
        IF (field_type = 261) THEN
            field_length = NULL;
        ELSE IF (type_code IS NOT NULL AND type_code NOT STARTING WITH 's' AND type_code <> 'x') THEN
            field_length = 80;
        IF (type_code IS NOT NULL) THEN
        BEGIN
            header = counted(column_name) || counted(type_code);
            header_literal = lit(header);
            old_fragment = fragment('OLD', column_name, header_literal, type_code, field_length, assembly,
                                    decimal_floats);
            new_fragment = fragment('NEW', column_name, header_literal, type_code, field_length, assembly,
                                    decimal_floats);
            IF (assembly <> 'v') THEN
            BEGIN
                -- A run of parts must fit in a VARCHAR, and BLOB_APPEND
                -- takes at most 255 arguments: past 250 the rest go into
                -- one more BLOB_APPEND, its last.
                run_piece = OCTET_LENGTH(header) + 12 + IIF(field_length IS NULL, 0, value_bytes);
                opening = '';
                IF (assembly = 'a' AND arguments > 250) THEN
                BEGIN
                    opening = ', BLOB_APPEND(CAST('''' AS VARCHAR(1) CHARACTER SET OCTETS), ''''';
                    closing = closing || ')';
                    arguments = 2;
                    run_bytes = 0;
                END
                ELSE IF (run_bytes + run_piece > 32000) THEN
                BEGIN
                    opening = IIF(assembly = 'a', ', ''''', ') || (''''');
                    arguments = arguments + 1;
                    run_bytes = 0;
                END
                old_fragment = opening || old_fragment;
                new_fragment = opening || new_fragment;
                run_bytes = run_bytes + run_piece;
                IF (field_length IS NULL AND assembly = 'a') THEN
                BEGIN
                    arguments = arguments + 2;
                    run_bytes = 0;
                END
                IF (field_length IS NULL AND assembly = 'c') THEN
                    inserted_blobs = inserted_blobs || nl || '                || COALESCE(NEW.' || q(column_name)
                        || ', CAST('''' AS VARCHAR(1) CHARACTER SET OCTETS))';
            END
            IF (CHAR_LENGTH(old_part) + CHAR_LENGTH(old_fragment) > 8000) THEN
            BEGIN
                old_expr = old_expr || old_part;
                old_part = '';
            END
            IF (CHAR_LENGTH(new_part) + CHAR_LENGTH(new_fragment) > 8000) THEN
            BEGIN
                new_expr = new_expr || new_part;
                new_part = '';
            END
            old_part = old_part || old_fragment;
            new_part = new_part || new_fragment;
            IF (in_key) THEN
            BEGIN
                key_bytes = key_bytes + OCTET_LENGTH(header) + 12 + IIF(field_type = 261, 100000, value_bytes);
                key_old = key_old || fragment('OLD', column_name, header_literal, type_code, field_length, 'k', FALSE);
                key_new = key_new || fragment('NEW', column_name, header_literal, type_code, field_length, 'k', FALSE);
            END
        END
    END
    old_expr = old_expr || old_part || closing;
    new_expr = new_expr || new_part || closing;
    -- A key longer than EVENT_LOG.PK_ROW holds is left out like a missing
    -- one (a longer PK_ROW would cost every insert of the log: about 1.4 µs
    -- per row for each 1,000 bytes of its declared length, embedded
    -- Firebird 5), so that no migration of the application is refused.
    IF (key_bytes > 1000) THEN
    BEGIN
        REASON = 'key too long';
        key_old = '''~''';
        key_new = '''~''';
    END
    IF (REASON IS NULL) THEN
    BEGIN
        INSERT_KEY = key_new;
        INSERT_ROW = new_expr || inserted_blobs;
    END

    -- Firebird compiles a trigger with at most 256 contexts, and every
    -- INSERT takes one (NEW, OLD and the subqueries of --when conditions take
    -- theirs): about 42 IUD subscriptions with --when, or 127 without, made
    -- 'Too many Contexts'. Past 200 logging statements, every log goes
    -- through one sub-procedure of the trigger instead, which takes no
    -- context of the trigger's and costs its call (about 3 us per event).
    SELECT COUNT(*) + COUNT(WHEN_CONDITION) FROM EVENT_SUBSCRIBER
    WHERE TABLE_NAME = :TABLE_NAME AND ACTIVE
    INTO log_statements;
    shared_log = log_statements > 200;

    actions = 'IUD';
    WHILE (actions <> '') DO
    BEGIN
        action = LEFT(actions, 1);
        actions = SUBSTRING(actions FROM 2);
        IF (NOT EXISTS (SELECT 1 FROM EVENT_SUBSCRIBER
                        WHERE TABLE_NAME = :TABLE_NAME AND ACTION = :action AND ACTIVE)) THEN
            CONTINUE;
        block = '';
        block_part = '';
        logs = '';
        logs_part = '';
        any_match = NULL;
        subscriptions = 0;
        conditional = 0;
        FOR SELECT SUB_ID, TRIM(TAG), WATCH_COLUMNS, WHEN_CONDITION FROM EVENT_SUBSCRIBER
            WHERE TABLE_NAME = :TABLE_NAME AND ACTION = :action AND ACTIVE
            ORDER BY SUB_ID
            INTO sub_id, tag, watch_columns, when_condition
        DO
        BEGIN
            subscriptions = subscriptions + 1;
            condition = NULL;
            IF (action = 'U' AND watch_columns IS NOT NULL) THEN
            BEGIN
                changed = NULL;
                -- WATCH_COLUMNS is a JSON list; a watched column dropped since
                -- is gone from the condition (none left: never matches).
                FOR SELECT TRIM(TRAILING FROM rf.RDB$FIELD_NAME)
                    FROM RDB$RELATION_FIELDS rf
                    JOIN RDB$FIELDS f ON f.RDB$FIELD_NAME = rf.RDB$FIELD_SOURCE
                    WHERE rf.RDB$RELATION_NAME = :TABLE_NAME
                      AND f.RDB$DIMENSIONS IS NULL AND f.RDB$COMPUTED_BLR IS NULL
                    ORDER BY rf.RDB$FIELD_POSITION
                    INTO column_name
                DO
                    IF (POSITION('"' || REPLACE(REPLACE(column_name, '\', '\\'), '"', '\"') || '"'
                                 IN watch_columns) > 0) THEN
                        changed = COALESCE(changed || ' OR ', '') || 'NEW.' || q(column_name)
                            || ' IS DISTINCT FROM OLD.' || q(column_name);
                condition = '(' || COALESCE(changed, 'FALSE') || ')';
            END
            IF (when_condition IS NOT NULL) THEN
                condition = COALESCE(condition || ' AND ', '') || '(' || portable(when_condition) || ')';
            IF (condition IS NOT NULL) THEN
            BEGIN
                conditional = conditional + 1;
                declared = 'DECLARE matched_' || sub_id || ' BOOLEAN;' || nl;
                matching = '        matched_' || sub_id || ' = IIF(' || condition || ', TRUE, FALSE);' || nl;
                any_match = COALESCE(any_match || ' OR ', '') || 'matched_' || sub_id || ' IS NOT FALSE';
                IF (when_condition IS NOT NULL) THEN
                BEGIN
                    -- A condition that raises (a division by zero, a failed
                    -- cast) must not fail the application's write: the change
                    -- is logged dead with the error, for `subs dead` and
                    -- `subs retry`.
                    declared = declared || 'DECLARE failure_' || sub_id
                        || ' VARCHAR(1100) CHARACTER SET UTF8;' || nl;
                    matching = '        BEGIN' || nl || '    ' || matching
                        || '            WHEN ANY DO' || nl
                        || '            BEGIN' || nl
                        || '                matched_' || sub_id || ' = NULL;' || nl
                        || '                failure_' || sub_id || ' = ''the --when condition raised: '' || '
                        || caught_error || ';' || nl
                        || '            END' || nl
                        || '        END' || nl;
                END
                IF (CHAR_LENGTH(declarations_part) + CHAR_LENGTH(declared) > 8000) THEN
                BEGIN
                    declarations = declarations || declarations_part;
                    declarations_part = '';
                END
                declarations_part = declarations_part || declared;
                IF (CHAR_LENGTH(block_part) + CHAR_LENGTH(matching) > 8000) THEN
                BEGIN
                    block = block || block_part;
                    block_part = '';
                END
                IF (CHAR_LENGTH(matching) > 8000) THEN
                    block = block || matching;
                ELSE
                    block_part = block_part || matching;
            END
            gate = '';
            IF (condition IS NOT NULL) THEN
                gate = '        IF (matched_' || sub_id || ' IS TRUE) THEN' || nl;
            key_hash = 'HASH(' || lit(TABLE_NAME || '|' || tag || '|') || ' || :row_key)';
            -- A tag's event is posted once per transaction (POST_EVENT on
            -- every row cost a bulk insert in PSQL 2-4 us a row and
            -- subscription), and again by EVENT_CAPTURE_AT_COMMIT: a
            -- ROLLBACK TO SAVEPOINT takes back the post, but not the mark
            -- that says it was made.
            post = '            IF (RDB$GET_CONTEXT(''USER_TRANSACTION'', ' || lit('EVENT_CAPTURE_POSTED ' || tag)
                || ') IS NULL) THEN' || nl || '                EXECUTE PROCEDURE post_tag(' || lit(tag) || ');' || nl;
            log_piece = '        -- subscription ' || sub_id || ': ' || tag || nl || gate;
            IF (shared_log) THEN
                log_piece = log_piece || '        BEGIN' || nl
                    || '            EXECUTE PROCEDURE log_event(' || sub_id || ', ' || key_hash
                    || ', FALSE, NULL, :row_key, :old_values, :new_values);' || nl || post
                    || '        END' || nl;
            ELSE
                log_piece = log_piece || '        BEGIN' || nl
                    || '            INSERT INTO EVENT_LOG (SUB_ID, PK_ROW, KEY_HASH, OLD_ROW, NEW_ROW' || created_column || ')'
                    || nl || '            VALUES (' || sub_id || ', :row_key, ' || key_hash || ', :old_values, :new_values'
                    || created_value || ');' || nl || post
                    || '        END' || nl;
            IF (when_condition IS NOT NULL) THEN
            BEGIN
                log_piece = log_piece || '        ELSE IF (matched_' || sub_id || ' IS NULL) THEN' || nl;
                IF (shared_log) THEN
                    log_piece = log_piece || '            EXECUTE PROCEDURE log_event(' || sub_id || ', ' || key_hash
                        || ', TRUE, :failure_' || sub_id || ', :row_key, :old_values, :new_values);' || nl;
                ELSE
                    log_piece = log_piece
                        || '            INSERT INTO EVENT_LOG (SUB_ID, PK_ROW, KEY_HASH, OLD_ROW, NEW_ROW, DEAD, DEAD_AT, '
                        || 'LAST_ERROR' || created_column || ')' || nl || '            VALUES (' || sub_id || ', :row_key, '
                        || key_hash || ', :old_values, :new_values, TRUE, ' || logged_at || ', :failure_' || sub_id
                        || created_value || ');' || nl;
            END
            IF (CHAR_LENGTH(logs_part) + CHAR_LENGTH(log_piece) > 8000) THEN
            BEGIN
                logs = logs || logs_part;
                logs_part = '';
            END
            logs_part = logs_part || log_piece;
        END
        block = block || block_part;
        logs = logs || logs_part;
        IF (conditional = subscriptions) THEN
        BEGIN
            -- Every subscription of this action has a condition: the row is
            -- encoded only when one matched (or raised, to log it dead).
            gated = TRUE;
            block = block || '        wanted = ' || any_match || ';' || nl;
        END
        IF (block <> '') THEN
            checks = checks || '    IF (' || DECODE(action, 'I', 'INSERTING', 'U', 'UPDATING', 'D', 'DELETING')
                || ') THEN' || nl || '    BEGIN' || nl || block || '    END' || nl;
        -- The action's event rows are written again while subs's own
        -- housekeeping holds EVENT_LOG for the milliseconds of a claim
        -- index rebuild, for up to 2 s: a writer whose transaction is NO
        -- WAIT would fail there ("lock conflict ... Acquire lock for
        -- relation (EVENT_LOG) failed"), where it succeeds without subs. A
        -- writer that waits for locks waits there as for any lock.
        body = body || '    IF (' || DECODE(action, 'I', 'INSERTING', 'U', 'UPDATING', 'D', 'DELETING') || ') THEN'
            || nl || '    WHILE (TRUE) DO' || nl || '    BEGIN' || nl || logs
            || '        LEAVE;' || nl
            || '        WHEN GDSCODE lock_conflict DO' || nl
            || '        BEGIN' || nl
            || '            log_blocked_since = COALESCE(log_blocked_since, CAST(''NOW'' AS TIMESTAMP));' || nl
            || '            IF (DATEDIFF(MILLISECOND FROM log_blocked_since TO CAST(''NOW'' AS TIMESTAMP)) >= 2000) THEN' || nl
            || '                EXCEPTION;' || nl
            || '        END' || nl
            || '    END' || nl;
        events = COALESCE(events || ' OR ', '')
            || DECODE(action, 'I', 'INSERT', 'U', 'UPDATE', 'D', 'DELETE');
    END
    IF (events IS NULL) THEN
    BEGIN
        REASON = 'no subscription';
        SUSPEND;
        EXIT;
    END
    -- Each row image is encoded once for all actions: its expression is most
    -- of the trigger's text, which every attachment compiles on its first
    -- write to the table.
    pad = IIF(gated, '        ', '    ');
    -- A concatenated image's BLOB values, each appended in a statement of
    -- its own, and only when it is not NULL: appending an empty one would
    -- copy the image so far all the same.
    IF (assembly = 'c') THEN
        FOR SELECT TRIM(TRAILING FROM rf.RDB$FIELD_NAME)
            FROM RDB$RELATION_FIELDS rf
            JOIN RDB$FIELDS f ON f.RDB$FIELD_NAME = rf.RDB$FIELD_SOURCE
            WHERE rf.RDB$RELATION_NAME = :TABLE_NAME
              AND f.RDB$FIELD_TYPE = 261
              AND f.RDB$DIMENSIONS IS NULL
              AND f.RDB$COMPUTED_BLR IS NULL
            ORDER BY rf.RDB$FIELD_POSITION
            INTO column_name
        DO
        BEGIN
            column_ref = q(column_name);
            old_appends = old_appends || pad || '    IF (OLD.' || column_ref || ' IS NOT NULL) THEN old_values = old_values || OLD.'
                || column_ref || ';' || nl;
            new_appends = new_appends || pad || '    IF (NEW.' || column_ref || ' IS NOT NULL) THEN new_values = new_values || NEW.'
                || column_ref || ';' || nl;
        END
    IF (events CONTAINING 'DELETE' AND events <> 'DELETE') THEN
        capture = pad || 'IF (DELETING) THEN' || nl || pad || '    row_key = ' || key_old || ';' || nl
            || pad || 'ELSE' || nl || pad || '    row_key = ' || key_new || ';' || nl;
    ELSE
        capture = pad || 'row_key = ' || IIF(events = 'DELETE', key_old, key_new) || ';' || nl;
    IF (events CONTAINING 'UPDATE' OR events CONTAINING 'DELETE') THEN
        capture = capture || pad || 'IF (NOT INSERTING) THEN' || nl
            || IIF(old_appends = '', '', pad || 'BEGIN' || nl)
            || pad || '    old_values = ' || old_expr || ';' || nl || old_appends
            || IIF(old_appends = '', '', pad || 'END' || nl);
    IF (events CONTAINING 'INSERT' OR events CONTAINING 'UPDATE') THEN
        capture = capture || pad || 'IF (NOT DELETING) THEN' || nl
            || IIF(new_appends = '', '', pad || 'BEGIN' || nl)
            || pad || '    new_values = ' || new_expr || ';' || nl || new_appends
            || IIF(new_appends = '', '', pad || 'END' || nl);
    declarations = declarations || declarations_part;
    IF (zone IS NOT NULL AND NOT shared_log) THEN
    BEGIN
        declarations = declarations || 'DECLARE captured_at TIMESTAMP;' || nl;
        capture = pad || 'captured_at = ' || stamp || ';' || nl || capture;
    END
    IF (gated) THEN
    BEGIN
        declarations = declarations || 'DECLARE wanted BOOLEAN = TRUE;' || nl;
        capture = '    IF (wanted) THEN' || nl || '    BEGIN' || nl || capture || '    END' || nl;
    END
    SOURCE = 'CREATE OR ALTER TRIGGER ' || q(TRIGGER_NAME) || ' FOR ' || q(TABLE_NAME) || nl
        || 'ACTIVE AFTER ' || events || ' POSITION 32000' || nl
        || 'AS' || nl
        || 'DECLARE row_key VARCHAR(1000) CHARACTER SET OCTETS;' || nl
        || 'DECLARE old_values BLOB SUB_TYPE BINARY;' || nl
        || 'DECLARE new_values BLOB SUB_TYPE BINARY;' || nl
        || 'DECLARE log_blocked_since TIMESTAMP;' || nl
        || declarations
        || 'DECLARE PROCEDURE post_tag (tag VARCHAR(40) CHARACTER SET ASCII)' || nl
        || 'AS' || nl
        || 'DECLARE posting VARCHAR(300) CHARACTER SET ASCII;' || nl
        || 'BEGIN' || nl
        || '    POST_EVENT ''subs:'' || tag;' || nl
        || '    posting = COALESCE(RDB$GET_CONTEXT(''USER_TRANSACTION'', ''EVENT_CAPTURE_POSTS''), '''') || tag || '' '';' || nl
        || '    IF (CHAR_LENGTH(posting) <= 255) THEN' || nl
        || '    BEGIN' || nl
        || '        RDB$SET_CONTEXT(''USER_TRANSACTION'', ''EVENT_CAPTURE_POSTS'', posting);' || nl
        || '        RDB$SET_CONTEXT(''USER_TRANSACTION'', ''EVENT_CAPTURE_POSTED '' || tag, 1);' || nl
        || '    END' || nl
        || '    WHEN ANY DO' || nl
        || '    BEGIN' || nl
        || '    END' || nl
        || 'END' || nl
        || IIF(shared_log,
               'DECLARE PROCEDURE log_event (sub_id INTEGER, key_hash BIGINT,' || nl
               || '    dead BOOLEAN, failure VARCHAR(1100) CHARACTER SET UTF8, row_key VARCHAR(1000) CHARACTER SET OCTETS,' || nl
               || '    old_values BLOB SUB_TYPE BINARY, new_values BLOB SUB_TYPE BINARY)' || nl
               || 'AS' || nl
               || 'BEGIN' || nl
               || '    IF (dead) THEN' || nl
               || '        INSERT INTO EVENT_LOG (SUB_ID, PK_ROW, KEY_HASH, OLD_ROW, NEW_ROW, DEAD, DEAD_AT, LAST_ERROR'
               || created_column || ')' || nl
               || '        VALUES (:sub_id, :row_key, :key_hash, :old_values, :new_values, TRUE, ' || stamp
               || ', :failure' || log_created_value || ');' || nl
               || '    ELSE' || nl
               || '        INSERT INTO EVENT_LOG (SUB_ID, PK_ROW, KEY_HASH, OLD_ROW, NEW_ROW' || created_column || ')' || nl
               || '        VALUES (:sub_id, :row_key, :key_hash, :old_values, :new_values' || log_created_value || ');' || nl
               || 'END' || nl,
               '')
        || 'BEGIN' || nl || checks || capture || body || 'END';
    SUSPEND;
END;

-- name: refused_exception
-- Raised with its own message when subs must refuse a DDL statement or a
-- subscription it cannot capture.
CREATE EXCEPTION EVENT_CAPTURE_REFUSED 'subs cannot capture this table';

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
DECLARE object_name VARCHAR(63) CHARACTER SET UTF8;
DECLARE object_kind VARCHAR(10) CHARACTER SET ASCII;
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
        BEGIN
            -- Compiled in the attachment of whichever DDL got here, so in its
            -- character set: the generator writes literals as hex, but a
            -- name with a character that set lacks cannot be written.
            BEGIN
                EXECUTE STATEMENT source;
                WHEN GDSCODE transliteration_failed DO
                    EXCEPTION EVENT_CAPTURE_REFUSED
                        'subs cannot write the capture trigger of table ' || TABLE_NAME || ' in this attachment: '
                        || 'a name it captures or a --when condition uses has a character the attachment''s '
                        || 'character set lacks; run this statement from an attachment in UTF8';
            END
            -- What the table's earlier trigger was found to need for its
            -- conditions: a trigger made again (the table dropped and
            -- created again) has lost it, and writers without it of their
            -- own would be refused until a listener's settle. A right this
            -- user may not give fails quietly; the settle grants it later.
            FOR SELECT OBJECT_NAME, OBJECT_KIND FROM EVENT_CAPTURE_RIGHT
                WHERE TABLE_NAME = :TABLE_NAME
                INTO object_name, object_kind
            DO
            BEGIN
                EXECUTE STATEMENT 'GRANT '
                    || IIF(object_kind = 'select', 'SELECT ON ', 'EXECUTE ON ' || UPPER(object_kind) || ' ')
                    || '"' || REPLACE(object_name, '"', '""') || '" TO TRIGGER "'
                    || REPLACE(TRIGGER_NAME, '"', '""') || '"';
                WHEN ANY DO
                    BEGIN
                    END
            END
        END
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
        SELECT TRIM(TRAILING FROM RDB$OWNER_NAME) FROM RDB$RELATIONS WHERE RDB$RELATION_NAME = :TABLE_NAME INTO owner;
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
-- they reconnected. The marks are context variables of the transaction,
-- named by a hash of the table name (a collision only regenerates a
-- trigger that did not need it). Until version 16 it refused a new primary
-- key too long to capture; such a key is now left out of the events.
CREATE OR ALTER TRIGGER EVENT_CAPTURE_AFTER_DDL
ACTIVE AFTER CREATE TABLE OR ALTER TABLE OR ALTER DOMAIN POSITION 32000
AS
DECLARE table_name VARCHAR(63) CHARACTER SET UTF8;
BEGIN
    FOR SELECT DISTINCT TRIM(TRAILING FROM s.TABLE_NAME) FROM EVENT_SUBSCRIBER s
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
        RDB$SET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC ' || HASH(table_name), 1);
        RDB$SET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC', 1);
    END
END;

-- name: commit_trigger
-- Posts again the events of the tags the committing transaction's capture
-- triggers logged for (their post_tag lists them in EVENT_CAPTURE_POSTS;
-- the first post of each may have been taken back by a ROLLBACK TO
-- SAVEPOINT), so that the listeners of every logged event wake up. Then
-- regenerates the capture triggers of the tables the transaction's DDL
-- marked (EVENT_CAPTURE_AFTER_DDL). The engine runs
-- commit triggers before it applies the transaction's DDL, so the new
-- trigger commits together with the new shape of its table, and the
-- dependencies of a dropped column are checked against it. It runs on
-- COMMIT RETAINING too, and then clears the marks. Every other commit in
-- the database pays two context lookups. It names subs's objects only in
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
DECLARE posts VARCHAR(255) CHARACTER SET NONE;
DECLARE tag VARCHAR(255) CHARACTER SET NONE;
BEGIN
    posts = RDB$GET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_POSTS');
    IF (posts IS NOT NULL) THEN
    BEGIN
        RDB$SET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_POSTS', NULL);
        WHILE (POSITION(' ' IN posts) > 0) DO
        BEGIN
            tag = LEFT(posts, POSITION(' ' IN posts) - 1);
            posts = SUBSTRING(posts FROM CHAR_LENGTH(tag) + 2);
            POST_EVENT 'subs:' || tag;
            RDB$SET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_POSTED ' || tag, NULL);
        END
        -- The list is only ever written by post_tag, but the commit is
        -- the application's: nothing here may fail it.
        WHEN ANY DO
        BEGIN
        END
    END
    IF (RDB$GET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_SYNC') IS NOT NULL) THEN
    BEGIN
        FOR EXECUTE STATEMENT 'SELECT DISTINCT TRIM(TRAILING FROM TABLE_NAME) FROM EVENT_SUBSCRIBER'
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

-- name: grant_ddl_rights
-- DDL triggers run for every user's DDL, and the commit trigger for every
-- commit: they get what they read and run.
GRANT SELECT ON EVENT_SUBSCRIBER TO TRIGGER EVENT_CAPTURE_BEFORE_DDL;

-- name: grant_ddl_rights_after
GRANT SELECT ON EVENT_SUBSCRIBER TO TRIGGER EVENT_CAPTURE_AFTER_DDL;

-- name: grant_source_after
-- One made before version 16 still runs the AFTER trigger that asked the
-- generator whether a new primary key was too long, so the right stays.
GRANT EXECUTE ON PROCEDURE EVENT_CAPTURE_SOURCE TO TRIGGER EVENT_CAPTURE_AFTER_DDL;

-- name: grant_sync_after
-- An attachment keeps the database triggers it loaded when it attached: one
-- made before version 14 still runs the AFTER trigger that called
-- EVENT_CAPTURE_SYNC itself (and no commit trigger), so the right stays.
GRANT EXECUTE ON PROCEDURE EVENT_CAPTURE_SYNC TO TRIGGER EVENT_CAPTURE_AFTER_DDL;

-- name: grant_commit_rights
GRANT SELECT ON EVENT_SUBSCRIBER TO TRIGGER EVENT_CAPTURE_AT_COMMIT;

-- name: grant_sync
GRANT EXECUTE ON PROCEDURE EVENT_CAPTURE_SYNC TO TRIGGER EVENT_CAPTURE_AT_COMMIT;

-- name: grant_source
GRANT EXECUTE ON PROCEDURE EVENT_CAPTURE_SOURCE TO PROCEDURE EVENT_CAPTURE_SYNC;

-- name: grant_source_read
GRANT SELECT ON EVENT_SUBSCRIBER TO PROCEDURE EVENT_CAPTURE_SOURCE;

-- name: grant_source_time_zone
GRANT EXECUTE ON FUNCTION EVENT_TIME_ZONE TO PROCEDURE EVENT_CAPTURE_SOURCE;

-- name: grant_sync_rights_read
GRANT SELECT ON EVENT_CAPTURE_RIGHT TO PROCEDURE EVENT_CAPTURE_SYNC;

-- name: grant_sync_refusal
-- The procedure runs for any user's DDL, and raises this exception: without
-- the right to, every such DDL of a user other than subs's failed with "no
-- permission for USAGE access to EXCEPTION EVENT_CAPTURE_REFUSED".
GRANT USAGE ON EXCEPTION EVENT_CAPTURE_REFUSED TO PROCEDURE EVENT_CAPTURE_SYNC;

-- name: backfill_procedure
-- The statements `subs backfill` runs, one per chunk of a subscribed table's
-- rows in primary-key order: each locks the rows it reads (WITH LOCK), so a
-- writer's later change of one of them waits for the chunk to commit and is
-- logged after its snapshot event. FIRST_CHUNK takes (CHUNK); NEXT_CHUNK
-- takes (CHUNK, then the last key done, column by column in key order) and
-- reads on from there through the primary key's index. Each returns the
-- rows read, the events logged (the subscription's --when applies) and the
-- captured key of the last row read. COUNT_ROWS counts the rows to do.
-- A row is captured as the insert subscription's trigger would capture it
-- (INSERT_KEY and INSERT_ROW), over a cursor named NEW.
CREATE OR ALTER PROCEDURE EVENT_BACKFILL_SOURCE (
    SUB_ID INTEGER,
    WHERE_CONDITION VARCHAR(4000) CHARACTER SET UTF8
)
RETURNS (
    FIRST_CHUNK BLOB SUB_TYPE TEXT CHARACTER SET UTF8,
    NEXT_CHUNK BLOB SUB_TYPE TEXT CHARACTER SET UTF8,
    COUNT_ROWS BLOB SUB_TYPE TEXT CHARACTER SET UTF8,
    REASON VARCHAR(40) CHARACTER SET UTF8
)
AS
DECLARE table_name VARCHAR(63) CHARACTER SET UTF8;
DECLARE tag VARCHAR(40) CHARACTER SET ASCII;
DECLARE when_condition VARCHAR(4000) CHARACTER SET UTF8;
DECLARE insert_key BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE insert_row BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE column_name VARCHAR(63) CHARACTER SET UTF8;
DECLARE quoted_table VARCHAR(130) CHARACTER SET UTF8;
DECLARE ref VARCHAR(130) CHARACTER SET UTF8;
DECLARE segment INTEGER = 0;
DECLARE parameters VARCHAR(8000) CHARACTER SET UTF8 = '';
DECLARE order_by VARCHAR(8000) CHARACTER SET UTF8 = '';
DECLARE after_key VARCHAR(8000) CHARACTER SET UTF8 = '';
DECLARE closing VARCHAR(100) CHARACTER SET UTF8 = '';
DECLARE head BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE tail BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE matching BLOB SUB_TYPE TEXT CHARACTER SET UTF8;
DECLARE nl CHAR(1) CHARACTER SET ASCII = '
';
BEGIN
    SELECT TABLE_NAME, TRIM(TAG), WHEN_CONDITION FROM EVENT_SUBSCRIBER
    WHERE SUB_ID = :SUB_ID AND ACTION = 'I' AND ACTIVE
    INTO table_name, tag, when_condition;
    IF (table_name IS NULL) THEN
    BEGIN
        REASON = 'no subscription';
        SUSPEND;
        EXIT;
    END
    SELECT REASON, INSERT_KEY, INSERT_ROW FROM EVENT_CAPTURE_SOURCE(:table_name)
    INTO REASON, insert_key, insert_row;
    IF (insert_key IS NULL) THEN
    BEGIN
        SUSPEND;
        EXIT;
    END
    REASON = NULL;
    quoted_table = '"' || REPLACE(table_name, '"', '""') || '"';
    -- Key columns in the index's order: the reads walk the index.
    FOR SELECT TRIM(TRAILING FROM s.RDB$FIELD_NAME)
        FROM RDB$RELATION_CONSTRAINTS rc
        JOIN RDB$INDEX_SEGMENTS s ON s.RDB$INDEX_NAME = rc.RDB$INDEX_NAME
        WHERE rc.RDB$RELATION_NAME = :table_name AND rc.RDB$CONSTRAINT_TYPE = 'PRIMARY KEY'
        ORDER BY s.RDB$FIELD_POSITION
        INTO column_name
    DO
    BEGIN
        segment = segment + 1;
        ref = '"' || REPLACE(column_name, '"', '""') || '"';
        parameters = parameters || ', AFTER_' || segment || ' TYPE OF COLUMN ' || quoted_table || '.' || ref || ' = ?';
        order_by = order_by || IIF(segment > 1, ', ', '') || ref;
        -- (k1, k2, ...) > (a1, a2, ...) as k1 >= a1 AND (k1 > a1 OR (k2 >= a2 AND (...))):
        -- its first term bounds the index walk.
        after_key = after_key || IIF(segment > 1, ' OR (', '') || ref || ' >= :AFTER_' || segment
            || ' AND (' || ref || ' > :AFTER_' || segment;
        closing = closing || IIF(segment > 1, '))', ')');
    END
    -- A --when condition that raises logs the row dead, as the trigger does.
    matching = '';
    IF (when_condition IS NOT NULL) THEN
        matching = '        failure = NULL;' || nl
            || '        BEGIN' || nl
            || '            matched = IIF(' || when_condition || ', TRUE, FALSE);' || nl
            || '            WHEN ANY DO' || nl
            || '            BEGIN' || nl
            || '                matched = NULL;' || nl
            || '                failure = ''the --when condition raised: '' || '
            || IIF(RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION') STARTING WITH '3.',
                   '''SQLSTATE '' || SQLSTATE || '', GDSCODE '' || GDSCODE', 'RDB$ERROR(MESSAGE)') || ';' || nl
            || '            END' || nl
            || '        END' || nl;
    head = 'EXECUTE BLOCK (CHUNK INTEGER = ?';
    tail = ')' || nl
        || 'RETURNS (ROWS_READ INTEGER, EVENTS INTEGER, LAST_KEY VARCHAR(1000) CHARACTER SET OCTETS)' || nl
        || 'AS' || nl
        || 'DECLARE row_key VARCHAR(1000) CHARACTER SET OCTETS;' || nl
        || 'DECLARE new_values BLOB SUB_TYPE BINARY;' || nl
        || 'DECLARE matched BOOLEAN = TRUE;' || nl
        || 'DECLARE failure VARCHAR(1100) CHARACTER SET UTF8;' || nl
        || 'BEGIN' || nl
        || '    ROWS_READ = 0;' || nl
        || '    EVENTS = 0;' || nl
        || '    FOR SELECT * FROM ' || quoted_table || nl
        || '        WHERE ' || COALESCE('(' || WHERE_CONDITION || ')', 'TRUE') || '{after}' || nl
        || '        ORDER BY ' || order_by || nl
        || '        ROWS :CHUNK' || nl
        || '        WITH LOCK' || nl
        || '        AS CURSOR NEW' || nl
        || '    DO' || nl
        || '    BEGIN' || nl
        || '        ROWS_READ = ROWS_READ + 1;' || nl
        || '        row_key = ' || insert_key || ';' || nl
        || '        LAST_KEY = row_key;' || nl
        || matching
        || '        IF (matched IS NOT FALSE) THEN' || nl
        || '        BEGIN' || nl
        || '            new_values = ' || insert_row || ';' || nl
        || '            INSERT INTO EVENT_LOG (SUB_ID, PK_ROW, KEY_HASH, NEW_ROW, DEAD, DEAD_AT, LAST_ERROR)' || nl
        || '            VALUES (' || SUB_ID || ', :row_key, HASH('''
        || REPLACE(table_name || '|' || tag || '|', '''', '''''') || ''' || :row_key), :new_values,' || nl
        || '                    :failure IS NOT NULL, IIF(:failure IS NULL, NULL, LOCALTIMESTAMP), :failure);' || nl
        || '            EVENTS = EVENTS + 1;' || nl
        || '        END' || nl
        || '    END' || nl
        || '    IF (EVENTS > 0) THEN' || nl
        || '        POST_EVENT ''subs:' || tag || ''';' || nl
        || '    SUSPEND;' || nl
        || 'END';
    COUNT_ROWS = 'SELECT COUNT(*) FROM ' || quoted_table
        || ' WHERE ' || COALESCE('(' || WHERE_CONDITION || ')', 'TRUE');
    FIRST_CHUNK = head || REPLACE(tail, '{after}', '');
    NEXT_CHUNK = head || parameters || REPLACE(tail, '{after}', nl || '          AND ' || after_key || closing);
    SUSPEND;
END;

-- name: grant_backfill_source
GRANT EXECUTE ON PROCEDURE EVENT_CAPTURE_SOURCE TO PROCEDURE EVENT_BACKFILL_SOURCE;

-- name: grant_backfill_read
GRANT SELECT ON EVENT_SUBSCRIBER TO PROCEDURE EVENT_BACKFILL_SOURCE;
