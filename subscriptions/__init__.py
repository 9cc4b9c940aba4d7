"""subs: Firebird table subscriptions dispatched to plugin handlers."""

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("subscriptions")
"""Decorator for plugin hook implementations: ``@hookimpl def register_handlers(register): ...``"""
