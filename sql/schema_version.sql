-- name: version_function_exists
SELECT COUNT(*) FROM RDB$FUNCTIONS
WHERE RDB$FUNCTION_NAME = 'EVENT_SCHEMA_VERSION' AND RDB$PACKAGE_NAME IS NULL;

-- name: version
SELECT EVENT_SCHEMA_VERSION() FROM RDB$DATABASE;

-- name: version_source
-- EVENT_SCHEMA_VERSION()'s body as this transaction sees it. Calling the
-- function runs the body this attachment compiled, which a concurrent
-- `subs init` may have replaced since.
SELECT RDB$FUNCTION_SOURCE FROM RDB$FUNCTIONS
WHERE RDB$FUNCTION_NAME = 'EVENT_SCHEMA_VERSION' AND RDB$PACKAGE_NAME IS NULL;

-- name: existing_tables
SELECT TRIM(TRAILING FROM RDB$RELATION_NAME) FROM RDB$RELATIONS
WHERE RDB$RELATION_NAME IN ('EVENT_SUBSCRIBER', 'EVENT_LOG', 'EVENT_LEASE');

