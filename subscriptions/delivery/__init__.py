"""Delivery: from the event log to the handlers and back.

Lives here: the listener's settings (``options``), claiming and settling
events (``claims``), claim sizes (``batching``), wake-ups (``notifications``),
the claimer loop (``worker``), handing events to the handler processes and
settling their reports (``dispatch``, ``pool``), the handler processes
themselves (``handler_process``, ``calls``, ``transactional``), lease
renewal (``heartbeat``), the supervisor and start-up checks (``supervisor``,
``startup``, ``lifeline``), the listener's own housekeeping (``reaper``,
``recovery``, ``housekeeping``, ``stats``) and its metrics (``metrics``,
``metrics_server``).

May import: ``subscriptions.capture``, ``subscriptions.schema``,
``subscriptions.db``, ``subscriptions.plugins`` and the top-level leaves.
"""
