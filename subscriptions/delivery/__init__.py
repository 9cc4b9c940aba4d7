"""Delivery: from the event log to the handlers and back.

Lives here: the listener's settings (``options``), claiming and settling
events (``claims``), claim sizes (``batching``), wake-ups (``notifications``),
running handlers (``handler_thread``, ``dispatch``), lease renewal
(``heartbeat``), the worker loop (``worker``), its supervisor and start-up
checks (``supervisor``, ``startup``), the listener's own housekeeping
(``reaper``, ``housekeeping``) and its metrics (``metrics``,
``metrics_server``).

May import: ``subscriptions.capture``, ``subscriptions.schema``,
``subscriptions.db``, ``subscriptions.plugins`` and the top-level leaves.
"""
