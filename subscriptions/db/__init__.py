"""The database seam: loading the engine, connecting, running SQL from ``sql/``.

Lives here: the embedded runtime (``runtime``), DSNs and credentials
(``settings``), attachments and short transactions (``connection``), the
named SQL blocks and identifier quoting (``sql``), engine error codes turned
into messages (``errors``), the one retry schedule (``retry``),
registration for Firebird events (``events``) and why a process of an
embedded database does not stop on Ctrl-Z (``terminal_stop``).

May import: ``subscriptions.errors`` only. Everything else imports this.
"""
