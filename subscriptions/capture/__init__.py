"""Capture: what the triggers write, and the subscriptions that decide it.

Lives here: validation of typed names, actions, tags and conditions
(``names``), catalogue metadata of user tables (``metadata``), reading
captured rows back (``values``), what Python knows of the trigger and the
``--when`` probe (``triggers``; the generator itself is in the database,
sql/capture.sql), keeping triggers in step with subscriptions
(``trigger_sync``), whether they still match their tables (``drift``) and
adding, removing and listing subscriptions (``subscribers``).

May import: ``subscriptions.db`` and the top-level leaves (``errors``, ``events``).
"""
