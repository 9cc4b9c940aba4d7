"""The database seam: loading the engine, connecting, running SQL from ``sql/``.

Lives here: the embedded runtime (``runtime``), DSNs and credentials
(``settings``), attachments and short transactions (``connection``), the
named SQL blocks and identifier quoting (``sql``), engine error codes turned
into messages (``errors``), the one retry schedule (``retry``),
registration for Firebird events (``events``), why a process of an
embedded database does not stop on Ctrl-Z (``terminal_stop``), and what
/proc says of a process (``processes``).

May import: ``subscriptions.errors`` only. Everything else imports this.
"""
