"""The plugin API. Keep it stable: third-party plugins implement these hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("subscriptions")


@hookspec
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    """Register event handlers by tag: ``register("send_email", send_email)``.

    ``register(tag, handler, *, transactional=False, batch=False)``:
    ``handler(event)`` is called once per delivery. A transactional handler
    also gets ``event.cursor``, a cursor in the transaction that acknowledges
    the event, so its own database writes commit atomically with the
    acknowledgement. A batch handler is called as ``handler(events)`` with the
    events of one claim (in log order) so it can overlap their I/O; it returns
    None when all were delivered, or one entry per event: None, or the
    exception that failed it (raising fails them all). It must finish within
    ``--timeout``. In ordered mode the events after the first failed one count
    as not started and come again after it.

    ``config`` maps each tag to its table from ``subs.toml`` (with environment
    overrides applied); a plugin may leave this argument out.
    """


@hookspec
def listener_startup(config: Mapping[str, Mapping[str, Any]]) -> None:
    """Called once when `subs listen` starts, before any worker: check what
    only trying can tell (a login, a server's address) and raise
    ``SubsError`` to refuse to start with that one-line message.

    ``config`` holds the ``[handlers.TAG]`` tables of the tags this listener
    serves (``--tag``), so a plugin checks only what will be used.
    """
