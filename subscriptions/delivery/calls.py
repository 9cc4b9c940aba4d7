"""Calling handlers, inside a handler process: one event per call, or a
batch handler's events together; an ``async def`` handler is run to
completion. What a call raised comes back as an exception per event."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from subscriptions.errors import RetryLater, Undeliverable
from subscriptions.events import Event

log = logging.getLogger("subs.handler")


@dataclass(frozen=True)
class Call:
    """``function(events[0])``, or with ``batch`` ``function(events)`` (a
    batch handler, see hookspecs)."""

    function: Callable[..., object]
    events: list[Event] = field(default_factory=list)
    batch: bool = False


def invoke(function: Callable[..., object], argument: object) -> object:
    """Call a handler; an ``async def`` one is run to completion."""
    result = function(argument)
    if not inspect.iscoroutine(result):
        return result
    import asyncio  # here, not at the top: only async handlers need it (start-up time)

    return asyncio.run(result)


def describe(error: BaseException) -> str:
    """How a failed attempt's error is stored and logged."""
    return f"{type(error).__name__}: {error}"


def retry_after(error: BaseException | None) -> float | None:
    """The least delay before the next attempt that a handler asked for by
    raising RetryLater, if it did."""
    return error.seconds if isinstance(error, RetryLater) else None


def undeliverable(error: BaseException | None) -> bool:
    """Whether a handler said, by raising Undeliverable, that no attempt can work."""
    return isinstance(error, Undeliverable)


class Caller:
    """Runs calls; warns once per tag about a handler that returns a value."""

    def __init__(self) -> None:
        self._odd_returns: set[str] = set()

    def run(self, call: Call) -> list[BaseException | None]:
        """One error (or None) per event of the call."""
        return self._call_batch(call) if call.batch else [self._call(call.function, call.events[0])]

    def _call(self, function: Callable[..., object], event: Event) -> BaseException | None:
        """Only raising fails an attempt: any other return value is ignored,
        which is worth a warning once per tag."""
        try:
            result = invoke(function, event)
        except BaseException as exc:  # the attempt's failure, reported to the listener
            return exc
        if result is not None and event.tag not in self._odd_returns:
            self._odd_returns.add(event.tag)
            log.warning(
                "handler for %s returned %.40r; return values are ignored: raise to fail an attempt",
                event.tag,
                result,
            )
        return None

    @staticmethod
    def _call_batch(call: Call) -> list[BaseException | None]:
        """A batch handler returns None or one entry (None or an exception) per event."""
        events = call.events
        try:
            result = invoke(call.function, list(events))
        except BaseException as exc:  # the whole batch failed
            return [exc] * len(events)
        if result is None:
            return [None] * len(events)
        errors = list(result) if isinstance(result, Sequence) and not isinstance(result, (str, bytes)) else []
        if len(errors) != len(events) or not all(e is None or isinstance(e, BaseException) for e in errors):
            failure = TypeError(
                f"batch handler for {events[0].tag} returned {result!r:.60}; expected None or "
                f"{len(events)} entries of None or an exception"
            )
            return [failure] * len(events)
        return errors
