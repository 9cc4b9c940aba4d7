"""The thread a worker runs its handlers on, so that one that hangs can be cut
off after ``--timeout``: the worker then records the attempt as failed and
exits, since a Python thread cannot be killed.

One long-lived thread per worker, handed a run of events at a time: it calls
their handlers one after the other and reports each outcome as it goes.
Handing over event by event costs two thread switches per event (about
50 µs here), more than a quick handler and the claim of its event together.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from subscriptions.events import Event

log = logging.getLogger("subs.worker")


@dataclass(frozen=True)
class Call:
    """One handler call: ``function(events[0])``, or with ``batch``
    ``function(events)`` (a batch handler, see hookspecs)."""

    function: Callable[..., object]
    events: list[Event]
    batch: bool = False


class HandlerTimeout(Exception):
    pass


@dataclass(frozen=True)
class Outcome:
    """How one handler call ended: ``error`` is what it raised, if anything."""

    error: BaseException | None
    seconds: float


class HandlerThread:
    """Runs runs of handler calls; ``stop`` set means "start no further call"."""

    def __init__(self, stop: threading.Event, timeout: float) -> None:
        self.stop = stop
        self.timeout = timeout
        self._thread: threading.Thread | None = None
        self._runs: queue.SimpleQueue[tuple[Sequence[Call], bool]] = queue.SimpleQueue()
        self._outcomes: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._odd_returns: set[str] = set()

    def start(self, calls: Sequence[Call], *, stop_on_failure: bool) -> None:
        """Hand over ``calls``; collect one ``outcome()`` per event, in order."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="handler", daemon=True)
            self._thread.start()
        self._runs.put((calls, stop_on_failure))

    def outcome(self) -> Outcome | None:
        """The next event's outcome, or None if it was not started (a stop, or an
        earlier failure with ``stop_on_failure``). Raises HandlerTimeout when
        it takes more than ``timeout`` seconds from the previous outcome; the
        thread is then left to the hung handler and must not be used again."""
        try:
            return self._outcomes.get(timeout=self.timeout)
        except queue.Empty:
            raise HandlerTimeout() from None

    def _loop(self) -> None:
        while True:
            calls, stop_on_failure = self._runs.get()
            carry_on = True
            for call in calls:
                if not carry_on or self.stop.is_set():
                    for _ in call.events:
                        self._outcomes.put(None)
                    continue
                started = time.monotonic()
                errors = self._call_batch(call) if call.batch else [self._call(call.function, call.events[0])]
                seconds = (time.monotonic() - started) / len(errors)
                for error in errors:
                    self._outcomes.put(Outcome(error, seconds) if carry_on else None)
                    carry_on = carry_on and (error is None or not stop_on_failure)

    def _call(self, function: Callable[..., object], event: Event) -> BaseException | None:
        """Run one handler; an ``async def`` one is run to completion. Any other
        return value is ignored (only raising fails an attempt), which is worth
        a warning once per tag."""
        try:
            result = function(event)
            if inspect.iscoroutine(result):
                result = asyncio.run(result)
        except BaseException as exc:  # reported to the worker thread
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
        """Run a batch handler: one error (or None) per event of the call."""
        events = call.events
        try:
            result = call.function(list(events))
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
