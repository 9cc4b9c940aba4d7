"""subs: Firebird table subscriptions dispatched to plugin handlers.

The public API is what this package exports (``Event``, ``RetryLater``,
``Undeliverable``, ``hookimpl``) and ``subscriptions.testing``; plugins also use
``subscriptions.config``'s setting helpers and raise
``subscriptions.errors.SubsError``. The rooms below it, each with a
docstring saying what lives there and what it may import: ``db`` (engine,
connections, SQL files), ``schema`` (install and upgrade), ``capture``
(triggers and what they write), ``delivery`` (the listener), ``ops`` (what
operators run) and ``cli`` (the command line).
"""

import pluggy

from subscriptions.errors import RetryLater, Undeliverable
from subscriptions.events import Event

__version__ = "0.1.0"
__all__ = ["Event", "RetryLater", "Undeliverable", "hookimpl", "__version__"]

hookimpl = pluggy.HookimplMarker("subscriptions")
"""Decorator for plugin hook implementations: ``@hookimpl def register_handlers(register): ...``"""
