-- Attachments of listener workers. Each worker connection carries its owner
-- ('host:pid', the same string as a lease's HOLDER) and its process's start
-- time in session context variables, so that a listener can find the
-- attachments of workers that died and that the server still keeps (with
-- their open transactions and locks), even when a later process has the pid.

-- name: tag
-- SUBS_SERVES is what the worker consumes: its mode and tags (see
-- delivery/serving.py); SUBS_STARTED its process's start time ('' unknown).
SELECT RDB$SET_CONTEXT('USER_SESSION', 'SUBS_WORKER', ?), RDB$SET_CONTEXT('USER_SESSION', 'SUBS_SERVES', ?),
       RDB$SET_CONTEXT('USER_SESSION', 'SUBS_STARTED', ?)
FROM RDB$DATABASE;

-- name: workers
-- Other attachments (of our user, or all for SYSDBA) tagged as a worker, with
-- their start times (NULL from a listener older than SUBS_STARTED).
SELECT V.MON$ATTACHMENT_ID, V.MON$VARIABLE_VALUE, T.MON$VARIABLE_VALUE
FROM MON$CONTEXT_VARIABLES V
LEFT JOIN MON$CONTEXT_VARIABLES T ON T.MON$ATTACHMENT_ID = V.MON$ATTACHMENT_ID
                                 AND T.MON$VARIABLE_NAME = 'SUBS_STARTED' AND T.MON$TRANSACTION_ID IS NULL
WHERE V.MON$VARIABLE_NAME = 'SUBS_WORKER'
  AND V.MON$TRANSACTION_ID IS NULL
  AND V.MON$ATTACHMENT_ID <> CURRENT_CONNECTION;

-- name: disconnect
-- Closes the attachment: the server rolls back its transactions.
DELETE FROM MON$ATTACHMENTS WHERE MON$ATTACHMENT_ID = ?;

-- name: serving
-- Other workers' owners, what they serve and their start times.
SELECT W.MON$VARIABLE_VALUE, S.MON$VARIABLE_VALUE, T.MON$VARIABLE_VALUE
FROM MON$CONTEXT_VARIABLES W
JOIN MON$CONTEXT_VARIABLES S ON S.MON$ATTACHMENT_ID = W.MON$ATTACHMENT_ID
                             AND S.MON$VARIABLE_NAME = 'SUBS_SERVES' AND S.MON$TRANSACTION_ID IS NULL
LEFT JOIN MON$CONTEXT_VARIABLES T ON T.MON$ATTACHMENT_ID = W.MON$ATTACHMENT_ID
                                 AND T.MON$VARIABLE_NAME = 'SUBS_STARTED' AND T.MON$TRANSACTION_ID IS NULL
WHERE W.MON$VARIABLE_NAME = 'SUBS_WORKER'
  AND W.MON$TRANSACTION_ID IS NULL
  AND W.MON$ATTACHMENT_ID <> CURRENT_CONNECTION;

-- name: sees_every_attachment
-- Whether MON$ shows this attachment every attachment, with its context
-- variables and transactions: SYSDBA, the database's owner and RDB$ADMIN see
-- them all, any other user only those of its own user name.
SELECT CURRENT_USER = 'SYSDBA' OR CURRENT_USER = TRIM(d.MON$OWNER) OR CURRENT_ROLE = 'RDB$ADMIN'
FROM MON$DATABASE d;

-- name: sees_every_attachment_fb4
-- The same on Firebird 4 and later, where a role with the system privilege
-- MONITOR_ANY_ATTACHMENT (RDB$ADMIN has them all) sees them too.
SELECT CURRENT_USER = 'SYSDBA' OR CURRENT_USER = TRIM(d.MON$OWNER) OR RDB$SYSTEM_PRIVILEGE(MONITOR_ANY_ATTACHMENT)
FROM MON$DATABASE d;
