-- name: attachment
-- The engine serving the database, and the role the attachment took: an
-- engine attaches with no role (NONE) when the role asked for does not
-- exist or is not granted to the user, without saying so.
SELECT RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION'), TRIM(TRAILING FROM CURRENT_ROLE) FROM RDB$DATABASE;
