"""Schema: subs's own tables, installed fresh or upgraded.

Lives here: the installed version and the check that it is current
(``version``), the fresh install from ``sql/schema.sql`` and the runner of
the frozen migrations in ``sql/migrations/`` (``upgrade``). Migrations are
self-contained SQL: they never call the Python of the day.

May import: ``subscriptions.db`` and the top-level leaves.
"""
