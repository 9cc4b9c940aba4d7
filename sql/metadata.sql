-- name: relation
-- RDB$RELATION_TYPE: 0 persistent table, 1 view, 4/5 global temporary tables.
-- The typed name is cast so that a name longer than any identifier is simply
-- not found (instead of a truncation error binding it to CHAR(31) on FB3).
SELECT TRIM(TRAILING FROM RDB$RELATION_NAME), RDB$RELATION_TYPE, COALESCE(RDB$SYSTEM_FLAG, 0)
FROM RDB$RELATIONS
WHERE RDB$RELATION_NAME = CAST(? AS VARCHAR(1000) CHARACTER SET UTF8);

-- name: columns
-- ARRAY and COMPUTED BY columns are not captured (see capture.sql).
SELECT TRIM(TRAILING FROM rf.RDB$FIELD_NAME), f.RDB$DIMENSIONS IS NULL AND f.RDB$COMPUTED_BLR IS NULL
FROM RDB$RELATION_FIELDS rf
JOIN RDB$FIELDS f ON f.RDB$FIELD_NAME = rf.RDB$FIELD_SOURCE
WHERE rf.RDB$RELATION_NAME = ?
ORDER BY rf.RDB$FIELD_POSITION;

-- name: primary_key
SELECT TRIM(TRAILING FROM s.RDB$FIELD_NAME)
FROM RDB$RELATION_CONSTRAINTS rc
JOIN RDB$INDEX_SEGMENTS s ON s.RDB$INDEX_NAME = rc.RDB$INDEX_NAME
WHERE rc.RDB$RELATION_NAME = ? AND rc.RDB$CONSTRAINT_TYPE = 'PRIMARY KEY'
ORDER BY s.RDB$FIELD_POSITION;

-- name: capture_trigger
-- Capture triggers are the table's triggers named SUBS$...
SELECT TRIM(TRAILING FROM RDB$TRIGGER_NAME) FROM RDB$TRIGGERS
WHERE RDB$RELATION_NAME = ? AND RDB$TRIGGER_NAME STARTING WITH 'SUBS$';

-- name: capture_trigger_versions
-- Every capture trigger with a fingerprint of its text and state: a touch
-- (subscribers.sql, touch_trigger) leaves it as it was.
SELECT TRIM(TRAILING FROM RDB$TRIGGER_NAME), TRIM(TRAILING FROM RDB$RELATION_NAME), COALESCE(HASH(RDB$TRIGGER_SOURCE), 0),
       COALESCE(RDB$TRIGGER_INACTIVE, 0)
FROM RDB$TRIGGERS
WHERE RDB$TRIGGER_NAME STARTING WITH 'SUBS$' AND RDB$RELATION_NAME IS NOT NULL;

-- name: capture_source
SELECT TRIGGER_NAME, SOURCE, REASON FROM EVENT_CAPTURE_SOURCE(?);

-- name: capture_trigger_state
-- Its text, whether it is inactive, and whether it was granted INSERT on
-- EVENT_LOG (user type 2: a trigger).
SELECT t.RDB$TRIGGER_SOURCE, COALESCE(t.RDB$TRIGGER_INACTIVE, 0) = 1,
       EXISTS (SELECT 1 FROM RDB$USER_PRIVILEGES p
               WHERE p.RDB$USER = t.RDB$TRIGGER_NAME AND p.RDB$USER_TYPE = 2
                 AND p.RDB$RELATION_NAME = 'EVENT_LOG' AND p.RDB$PRIVILEGE = 'I')
FROM RDB$TRIGGERS t
WHERE t.RDB$TRIGGER_NAME = ?;

-- name: capture_trigger_rights
-- What a capture trigger's --when conditions read or call (tables and
-- views in a FROM, its own table's included, which the engine records
-- without a column name, unlike NEW.x and OLD.x; procedures, functions,
-- packages; all as the engine recorded at the trigger's commit), and
-- whether the trigger holds the right to: a writer without that right of
-- its own has its write refused. System tables and legacy UDFs need no
-- right.
SELECT DISTINCT TRIM(TRAILING FROM d.RDB$DEPENDED_ON_NAME),
       TRIM(DECODE(d.RDB$DEPENDED_ON_TYPE, 0, 'select', 1, 'select', 5, 'procedure', 15, 'function', 'package')),
       EXISTS (SELECT 1 FROM RDB$USER_PRIVILEGES p
               WHERE p.RDB$USER = d.RDB$DEPENDENT_NAME AND p.RDB$USER_TYPE = 2
                 AND p.RDB$RELATION_NAME = d.RDB$DEPENDED_ON_NAME
                 AND p.RDB$PRIVILEGE = IIF(d.RDB$DEPENDED_ON_TYPE IN (0, 1), 'S', 'X'))
FROM RDB$DEPENDENCIES d
WHERE d.RDB$DEPENDENT_NAME = ? AND d.RDB$DEPENDENT_TYPE = 2 AND d.RDB$DEPENDED_ON_NAME <> 'EVENT_LOG'
  AND ((d.RDB$DEPENDED_ON_TYPE IN (0, 1) AND d.RDB$FIELD_NAME IS NULL
        AND EXISTS (SELECT 1 FROM RDB$RELATIONS r
                    WHERE r.RDB$RELATION_NAME = d.RDB$DEPENDED_ON_NAME AND COALESCE(r.RDB$SYSTEM_FLAG, 0) = 0))
       OR d.RDB$DEPENDED_ON_TYPE IN (5, 18)
       OR (d.RDB$DEPENDED_ON_TYPE = 15
           AND EXISTS (SELECT 1 FROM RDB$FUNCTIONS f
                       WHERE f.RDB$FUNCTION_NAME = d.RDB$DEPENDED_ON_NAME AND f.RDB$PACKAGE_NAME IS NULL
                         AND COALESCE(f.RDB$LEGACY_FLAG, 0) = 0)));

-- name: granted_listeners
-- Users and roles (user type 8 and 13) `subs grant` gave a listener's rights
-- to (they may run the schema version function), but not the owner of
-- subs's tables, who needs none.
SELECT DISTINCT TRIM(TRAILING FROM p.RDB$USER), p.RDB$USER_TYPE
FROM RDB$USER_PRIVILEGES p
WHERE p.RDB$RELATION_NAME = 'EVENT_SCHEMA_VERSION' AND p.RDB$OBJECT_TYPE = 15
  AND p.RDB$USER_TYPE IN (8, 13) AND p.RDB$PRIVILEGE = 'X'
  AND p.RDB$USER <> (SELECT RDB$OWNER_NAME FROM RDB$RELATIONS WHERE RDB$RELATION_NAME = 'EVENT_LOG');

-- name: role_exists
SELECT COUNT(*) FROM RDB$ROLES WHERE RDB$ROLE_NAME = ?;
