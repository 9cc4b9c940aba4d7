"""Running the handlers of a claimed batch and settling it: acknowledging
what was handled, recording failed attempts with their backoff (or death),
and giving back what was never started."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterator

from subscriptions.events import Event
from subscriptions.plugins import Handler

from .batching import BatchSize
from .claims import Claimer, stream_of
from .handler_thread import Call, HandlerThread, HandlerTimeout, Outcome
from .heartbeat import InFlight
from .metrics import Metrics
from .options import ORDERED, ListenOptions

log = logging.getLogger("subs.worker")
# The database stamps a retry's due time a moment after this process does.
RETRY_MARGIN = 0.05


class Dispatcher:
    """Delivers batches for one worker; ``stop`` set means "start nothing new"."""

    def __init__(
        self,
        options: ListenOptions,
        handlers: dict[str, Handler],
        stop: threading.Event,
        stamp: Callable[[], None],
        metrics: Metrics,
        batch: BatchSize,
    ) -> None:
        self.options = options
        # Ordered claims hold the stream's lease rather than each event.
        self.in_order = options.mode == ORDERED
        self.handlers = handlers
        self.stop = stop
        self.stamp = stamp
        self.metrics = metrics
        self.batch = batch
        self.in_flight = InFlight()
        self.handler_thread = HandlerThread(stop, options.timeout)
        self._retries_due: list[float] = []  # a heap of monotonic times

    def next_retry(self) -> float | None:
        """When (monotonic) the earliest retry this worker scheduled that is
        not due yet falls due: the worker wakes up then, not at the next poll.
        Kept until it passes, whatever else wakes the worker first."""
        now = time.monotonic()
        while self._retries_due and self._retries_due[0] <= now:
            heapq.heappop(self._retries_due)
        return self._retries_due[0] if self._retries_due else None

    def handle(self, claimer: Claimer, events: list[Event]) -> None:
        """Deliver claimed events; acknowledge the handled ones together and give
        back the ones not started (on stop, a timeout or, in order, a failure:
        later events of the subscription wait for it)."""
        if not events:
            return
        done: list[int] = []
        attempted: list[int] = []
        self.in_flight.add(e.id for e in events)
        try:
            for run in self._runs(claimer, events):
                if self.stop.is_set() or not self._deliver(claimer, run, done, attempted):
                    break
        finally:
            try:
                with self.in_flight.settling:
                    if self.in_order:
                        claimer.settle_head(stream_of(events[0]), done)
                    else:
                        claimer.ack(done)
                        claimer.release(e.id for e in events[len(attempted) :])
            finally:
                # Also when settling failed: the heartbeat would otherwise renew
                # these leases for ever and the events would never come back.
                self.in_flight.discard(e.id for e in events)
                for event in events:
                    claimer.undecodable.pop(event.id, None)

    def _runs(self, claimer: Claimer, events: list[Event]) -> Iterator[list[Event]]:
        """The batch in runs handed to the handler thread at once: a
        transactional handler's event alone (its transaction is this thread's),
        consecutive others together."""
        run: list[Event] = []
        for event in events:
            if self.handlers[event.tag].transactional and event.id not in claimer.undecodable:
                if run:
                    yield run
                    run = []
                yield [event]
            else:
                run.append(event)
        if run:
            yield run

    def _deliver(self, claimer: Claimer, run: list[Event], done: list[int], attempted: list[int]) -> bool:
        """Run the handlers of ``run``; each event whose attempt happened goes to
        ``attempted``, a handled one also to ``done`` (acknowledged with its
        batch) unless its handler is transactional (acknowledged with it).
        False if the batch is to go no further."""
        if self.handlers[run[0].tag].transactional and run[0].id not in claimer.undecodable:
            return self._deliver_transactional(claimer, run[0], attempted)
        self.handler_thread.start(self._calls(claimer, run), stop_on_failure=self.in_order)
        carry_on = True
        for event in run:
            try:
                outcome = self._outcome(event, attempted)
            except HandlerTimeout:
                self._failed(claimer, event, None)
                raise
            if outcome is None:
                carry_on = False
            elif outcome.error is None:
                done.append(event.id)
                self._observe(event, "handled", outcome.seconds)
            else:
                self._failed(claimer, event, outcome)
                carry_on = carry_on and not self.in_order
        return carry_on

    def _calls(self, claimer: Claimer, run: list[Event]) -> list[Call]:
        """One call per event, except that consecutive events of one batch
        handler's tag make one call (undecodable ones stay apart)."""
        calls: list[Call] = []
        for event in run:
            handler = self.handlers[event.tag]
            if handler.batch and event.id not in claimer.undecodable:
                last = calls[-1] if calls else None
                if last is not None and last.batch and last.events[0].tag == event.tag:
                    last.events.append(event)
                else:
                    calls.append(Call(handler.function, [event], batch=True))
            else:
                calls.append(Call(self._function(claimer, event), [event]))
        return calls

    def _function(self, claimer: Claimer, event: Event) -> Callable[..., object]:
        """The event's handler; for an event that could not be decoded, a
        stand-in that fails with the reason, so the attempt is counted and
        the event goes dead after --max-attempts like any failure."""
        error = claimer.undecodable.pop(event.id, None)
        if error is None:
            return self.handlers[event.tag].function

        def undecodable(_: Event) -> None:
            raise error

        return undecodable

    def _deliver_transactional(self, claimer: Claimer, event: Event, attempted: list[int]) -> bool:
        """The handler's writes and the acknowledgement commit together."""
        handler = self.handlers[event.tag]
        outcome: Outcome | None = None
        try:
            with claimer.db.transaction() as cursor:
                event.cursor = cursor
                try:
                    self.handler_thread.start([Call(handler.function, [event])], stop_on_failure=True)
                    outcome = self._outcome(event, attempted)
                finally:
                    event.cursor = None
                if outcome is None:
                    return False
                if outcome.error is not None:
                    raise outcome.error
                claimer.ack_in(cursor, event.id, held=self.in_order)
        except HandlerTimeout:
            self._failed(claimer, event, None)  # now that its transaction is rolled back
            raise
        except Exception as exc:  # the handler's, or its writes' at commit
            self._failed(claimer, event, Outcome(exc, outcome.seconds if outcome else 0.0))
            return False
        self._observe(event, "handled", outcome.seconds)
        return True

    def _outcome(self, event: Event, attempted: list[int]) -> Outcome | None:
        """The handler thread's report on ``event`` (None: not started). On a
        timeout the worker stops (the caller records the failed attempt)."""
        self.stamp()
        try:
            outcome = self.handler_thread.outcome()
        except HandlerTimeout:
            self.stop.set()  # first of all: the thread must start no further handler
            attempted.append(event.id)
            raise
        if outcome is not None:
            attempted.append(event.id)
        return outcome

    def _failed(self, claimer: Claimer, event: Event, outcome: Outcome | None) -> None:
        """Record a failed attempt; ``outcome`` None means it timed out."""
        if outcome is None:
            error, seconds = f"timed out after {self.options.timeout:g}s", self.options.timeout
        else:
            error, seconds = f"{type(outcome.error).__name__}: {outcome.error}", outcome.seconds
        dead = self.options.is_last_attempt(event.attempt)
        delay = 0.0 if dead else self.options.retry_delay(event.attempt)
        if not dead:
            heapq.heappush(self._retries_due, time.monotonic() + delay + RETRY_MARGIN)
        with self.in_flight.settling:
            claimer.fail(event.id, error, delay, dead, held=self.in_order)
        self._observe(event, "dead" if dead else "failed", seconds)
        if dead:
            log.error("event %s (%s) is dead after %s attempts: %s", event.id, event.tag, event.attempt, error)
        else:
            log.warning(
                "event %s (%s) attempt %s failed: %s; retrying in %.1fs",
                event.id,
                event.tag,
                event.attempt,
                error,
                delay,
            )

    def _observe(self, event: Event, outcome: str, seconds: float) -> None:
        self.metrics.observe(event.tag, outcome, seconds, event.subscription_id)
        self.batch.observe(event.tag, seconds)
