"""The plugin API. Keep it stable: third-party plugins implement these hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("subscriptions")


@hookspec
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    """Register event handlers by tag: ``register("send_email", send_email)``.

    ``register(tag, handler, *, transactional=False)``: ``handler(event)`` is
    called once per delivery. A transactional handler also gets ``event.cursor``,
    a cursor in the transaction that acknowledges the event, so its own
    database writes commit atomically with the acknowledgement.

    ``config`` maps each tag to its table from ``subs.toml`` (with environment
    overrides applied); a plugin may leave this argument out.
    """
