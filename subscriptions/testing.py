"""Helpers for testing handler plugins without a database.

    from subscriptions.testing import deliver, load_handlers, make_event

    handlers = load_handlers(plugins=["my_plugin.py"], config={"sms": {"to": "+100"}})
    deliver(handlers["sms"], make_event("sms", table="ORDERS", action="U"))

``load_handlers`` loads plugins exactly as the listener does, so a test also
catches a plugin that fails to import or registers a tag twice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from subscriptions.events import Event
from subscriptions.plugins import Handler, collect_handlers, plugin_manager


def make_event(
    tag: str = "test",
    *,
    table: str = "T",
    action: str = "I",
    pk: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    new: dict[str, Any] | None = None,
    attempt: int = 1,
    id: int = 1,
    created_at: dt.datetime | None = None,
    subscription_id: int = 1,
    database_id: str = "",
) -> Event:
    """An event shaped like a captured one: ``pk`` defaults to ``{"ID": id}``;
    ``new`` (inserts, updates) and ``old`` (updates, deletes) default to ``pk``."""
    if action not in ("I", "U", "D"):
        raise ValueError(f"action must be 'I', 'U' or 'D', not {action!r}")
    pk = {"ID": id} if pk is None else pk
    if new is None and action in "IU":
        new = dict(pk)
    if old is None and action in "UD":
        old = dict(pk)
    return Event(
        id=id,
        table=table,
        action=action,
        tag=tag,
        pk=pk,
        old=old,
        new=new,
        attempt=attempt,
        created_at=created_at or dt.datetime.now(),
        subscription_id=subscription_id,
        database_id=database_id,
    )


def load_handlers(
    plugins: Iterable[str] = (), config: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Handler]:
    """The handlers by tag that the listener would load with ``--plugin`` ``plugins``
    (module names or ``.py`` paths) and these ``[handlers.TAG]`` settings."""
    return collect_handlers(plugin_manager(plugins), config or {})


def deliver(handler: Handler | Callable[[Event], object], event: Event, *, cursor: Any = None) -> None:
    """Call a handler on one event as the listener does; its exceptions propagate.

    Only a transactional ``Handler`` (or a plain function) sees ``cursor``;
    other handlers get ``event.cursor = None``. A batch handler gets a batch
    of this one event, and the error it reports for it is raised. The
    caller's ``event`` is not modified.
    """
    if isinstance(handler, Handler):
        function, transactional = handler.function, handler.transactional
    else:
        function, transactional = handler, True
    delivered = dataclasses.replace(event, cursor=cursor if transactional else None)
    if isinstance(handler, Handler) and handler.batch:
        errors = cast(Sequence[BaseException | None] | None, function([delivered]))
        if errors is not None and errors[0] is not None:
            raise errors[0]
        return
    function(delivered)
