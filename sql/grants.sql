-- What a listener running as its own user needs (`subs grant USER`, or
-- `subs grant --to-role ROLE` for a role it connects with): read
-- the subscriptions, claim, settle and delete events, lease subscriptions
-- and runs of their events, and read the schema version. Writers need nothing: each
-- capture trigger holds its own right to insert into EVENT_LOG.
-- {grantee} is USER "NAME" or ROLE "NAME".
-- Housekeeping's index rebuild needs ALTER rights and is skipped without.

-- name: read_subscribers
GRANT SELECT ON EVENT_SUBSCRIBER TO {grantee};

-- name: work_events
GRANT SELECT, UPDATE, DELETE ON EVENT_LOG TO {grantee};

-- name: lease
GRANT SELECT, INSERT, UPDATE, DELETE ON EVENT_LEASE TO {grantee};

-- name: spans
GRANT SELECT, INSERT, UPDATE, DELETE ON EVENT_SPAN TO {grantee};

-- name: span_ids
GRANT USAGE ON SEQUENCE EVENT_SPAN_IDS TO {grantee};

-- name: event_ids
-- Claim floors read the last event id handed out (floors.sql); {generator}
-- is EVENT_LOG.EVENT_ID's identity generator, named by the engine.
GRANT USAGE ON GENERATOR {generator} TO {grantee};

-- name: database_id
-- Events leaving the database carry its id; the first listener makes it.
GRANT SELECT, INSERT ON EVENT_DATABASE TO {grantee};

-- name: backfill_state
-- `subs status` shows backfills.
GRANT SELECT ON EVENT_BACKFILL TO {grantee};

-- name: schema_version
GRANT EXECUTE ON FUNCTION EVENT_SCHEMA_VERSION TO {grantee};

-- name: capture_state
-- `subs status` and --drain's summary compare triggers with the generator.
GRANT EXECUTE ON PROCEDURE EVENT_CAPTURE_SOURCE TO {grantee};

-- name: capture_rights
-- Settling a capture trigger records what its conditions need.
GRANT SELECT, INSERT, DELETE ON EVENT_CAPTURE_RIGHT TO {grantee};

-- name: stats
-- Listeners record per-minute statistics for the console and prune them.
GRANT SELECT, INSERT, UPDATE, DELETE ON EVENT_STATS TO {grantee};

-- name: stream_held
-- Ordered claims raise it when another consumer takes a stream's lease first.
GRANT USAGE ON EXCEPTION EVENT_STREAM_HELD TO {grantee};

-- name: time_zone
-- Its attachments take subs's time zone (engine.sql).
GRANT EXECUTE ON FUNCTION EVENT_TIME_ZONE TO {grantee};

-- name: clock
-- Leases and retry times run on it (schema.sql).
GRANT EXECUTE ON FUNCTION EVENT_NOW TO {grantee};
