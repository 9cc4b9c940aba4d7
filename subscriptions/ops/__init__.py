"""Operations: what an operator runs beside the listener.

Lives here: ``subs init`` (``setup``), status and failing/dead events
(``status``), retrying and purging (``repair``), what the console shows
(``console``) and does (``console_actions``), backfill (``backfill``), a
listener's rights (``grants``), running in the background (``pidfile``,
``detach``, ``systemd``), the demo (``demo``) and plain text for people
(``text_table``).

May import: ``subscriptions.delivery``, ``subscriptions.capture``,
``subscriptions.schema``, ``subscriptions.db``, ``subscriptions.plugins`` and
the top-level leaves.
"""
