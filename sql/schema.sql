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
SELECT TRIM(RDB$RELATION_NAME) FROM RDB$RELATIONS
WHERE RDB$RELATION_NAME IN ('EVENT_SUBSCRIBER', 'EVENT_LOG', 'EVENT_LEASE');

-- name: engine_version
SELECT RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION') FROM RDB$DATABASE;

-- name: long_keys_logged
-- Events whose key is longer than ROW_KEY (schema version 6) holds.
SELECT COUNT(*) FROM EVENT_LOG WHERE CHAR_LENGTH(PK_KEY) > ?;

-- name: active_subscriptions
SELECT COUNT(*) FROM EVENT_SUBSCRIBER WHERE ACTIVE;

-- name: oldest_active_transaction
-- The oldest transaction still open (as the engine last worked it out: on a
-- database younger than about 100 transactions, Firebird 5 reports 1), and
-- this one.
SELECT MON$OLDEST_ACTIVE, CURRENT_TRANSACTION FROM MON$DATABASE;
