-- Attachments of listener workers. Each worker connection carries its owner
-- ('host:pid', the same string as EVENT_LOG.CLAIMED_BY) in a session context
-- variable, so that a listener can find the attachments of workers that died
-- and that the server still keeps (with their open transactions and locks).

-- name: tag
SELECT RDB$SET_CONTEXT('USER_SESSION', 'SUBS_WORKER', ?) FROM RDB$DATABASE;

-- name: workers
-- Other attachments (of our user, or all for SYSDBA) tagged as a worker.
SELECT V.MON$ATTACHMENT_ID, V.MON$VARIABLE_VALUE
FROM MON$CONTEXT_VARIABLES V
WHERE V.MON$VARIABLE_NAME = 'SUBS_WORKER'
  AND V.MON$TRANSACTION_ID IS NULL
  AND V.MON$ATTACHMENT_ID <> CURRENT_CONNECTION;

-- name: disconnect
-- Closes the attachment: the server rolls back its transactions.
DELETE FROM MON$ATTACHMENTS WHERE MON$ATTACHMENT_ID = ?;
