"""Capture: what the triggers write, and the subscriptions that decide it.

Lives here: validation of typed names, actions, tags and conditions
(``names``), catalogue metadata of user tables (``metadata``), the captured
value format both ways (``values``), the trigger generator (``triggers``),
keeping triggers in step with subscriptions (``trigger_sync``) and adding,
removing and listing subscriptions (``subscribers``).

May import: ``subscriptions.db`` and the top-level leaves (``errors``, ``events``).
"""
