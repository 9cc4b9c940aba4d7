"""subs: Firebird table subscriptions dispatched to plugin handlers."""

__version__ = "0.1.0"
