"""Handing claimed events to the handler processes and settling what they
report: acknowledging handled events together, recording failed attempts
with their backoff (or death) as they come, giving back what was never
started, and failing at once the event of a handler process that died or
ran over --timeout."""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import time
from collections.abc import Callable
from typing import TypeVar

from firebird.driver import DatabaseError

from subscriptions.db.errors import is_conflict
from subscriptions.db.retry import Backoff

from .batching import BatchSize
from .claimed import Claimed
from .claims import MAX_IDS, Claimer, Settlement, Stream
from .handler_process import Job, Report
from .heartbeat import InFlight
from .lockouts import SETTLING
from .metrics import Metrics
from .options import ORDERED, ListenOptions
from .pool import HandlerPool, Slot

log = logging.getLogger("subs.worker")
# The database stamps a retry's due time a moment after this process sets
# its timer for it: it stamps it this much earlier, so that the claim the
# timer wakes finds the event due, and the retry runs after the delay drawn,
# not that plus a margin.
RETRY_MARGIN = 0.05
# Longest wait for reports: the claimer stamps its progress in between.
WAIT_SLICE = 0.5
# Handled events acknowledged together at most (one settling statement).
ACK_EVERY = MAX_IDS
T = TypeVar("T")


class Dispatcher:
    """The claimer's side of the handler pool."""

    def __init__(
        self,
        options: ListenOptions,
        owner: str,
        metrics: Metrics,
        batch: BatchSize,
        waiting: Callable[[Claimer], bool],
    ) -> None:
        """``waiting`` is called while a settlement waits for another
        transaction's lock; it ends the wait by returning False."""
        self.options = options
        self.waiting = waiting
        self.in_order = options.mode == ORDERED
        self.metrics = metrics
        self.batch = batch
        self.in_flight = InFlight()
        self.pool = HandlerPool(options, owner, metrics)
        self._handled: list[int] = []  # handled, to be acknowledged together
        # Ordered mode: handled events of the stream batches settled so far
        # under a lease that goes on (a next batch runs), deleted together.
        self._settled_heads: dict[Stream, list[int]] = {}
        # Ordered mode: stream batches ended in this collect, settled
        # together at its end, with the ids to take out of flight then.
        self._settling: list[Settlement] = []
        self._settling_ids: list[int] = []
        self._unsettled: dict[int, int] = {}  # events not settled yet per span
        self._settled_spans: list[int] = []  # to give back with the next acknowledgement
        self._retries_due: list[float] = []  # a heap of monotonic times
        self._came_back = False  # a parallel job settled with events not handled

    # -- state ----------------------------------------------------------------------

    def free_slots(self) -> int:
        """Jobs the handler processes take now (each runs one and holds the next)."""
        return len(self.pool.open_slots())

    def open_slots(self) -> list[Slot]:
        """The places for those jobs, one per job. A claim hands its events to
        the places taken before it: while it ran, a process may have died,
        and looking again would replace it with one not ready yet, leaving
        fewer places than events claimed for them (seen: none at all). A job
        handed to a dead process is settled as never started."""
        return self.pool.open_slots()

    def idle(self) -> bool:
        """Whether a handler process has nothing to do."""
        return self.pool.idle_count() > 0

    def busy(self) -> bool:
        return bool(self.pool.busy())

    def busy_streams(self) -> set[Stream]:
        return {stream for slot in self.pool.busy() for _, stream in slot.queue if stream is not None}

    def running_streams(self) -> list[tuple[Stream, Slot, list[Claimed], int]]:
        """Ordered streams whose batch runs with nothing queued after it and
        no event failed so far, with its slot, its events and how many
        events of the stream up to its last are in hand (it and the handled
        ones not deleted yet): their next batch can be claimed while it runs
        (Claimer.claim_next)."""
        return [
            (slot.stream, slot, slot.job.events, len(slot.job.events) + len(self._settled_heads.get(slot.stream, ())))
            for slot in self.pool.busy()
            if slot.job is not None and slot.stream is not None
            if len(slot.queue) == 1 and len(slot.done) == slot.reported
        ]

    def next_retry(self) -> float | None:
        """When (monotonic) the earliest retry scheduled here that is not due
        yet falls due: the claimer wakes up then, not at the next poll."""
        now = time.monotonic()
        while self._retries_due and self._retries_due[0] <= now:
            heapq.heappop(self._retries_due)
        return self._retries_due[0] if self._retries_due else None

    def retry_due(self) -> bool:
        """Whether a retry scheduled here fell due since the last look."""
        due = False
        while self._retries_due and self._retries_due[0] <= time.monotonic():
            heapq.heappop(self._retries_due)
            due = True
        return due

    def came_back(self) -> bool:
        """Parallel mode: whether events handed out may be claimable again
        since the last look (a job settled with events not handled: given
        back or failed; or a retry fell due), so the next claim must walk
        each subscription from its first event."""
        came_back, self._came_back = self._came_back, False
        return self.retry_due() or came_back

    def halt(self) -> None:
        """Start no further handler; running ones finish (the listener stops)."""
        self.pool.stop.value = True

    def close(self) -> None:
        self.pool.close()

    # -- handing out ------------------------------------------------------------------

    def hand_out(self, events: list[Claimed], batch: int, places: list[Slot]) -> None:
        """Parallel mode: share ``events`` among ``places`` (open_slots, taken
        before the claim), in log order: jobs of up to ``batch`` events, but
        one for every idle process when there are fewer."""
        idle = len({id(slot) for slot in places if not slot.queue})
        jobs = min(len(places), max(math.ceil(len(events) / batch), min(len(events), idle)))
        share = math.ceil(len(events) / jobs)
        self.in_flight.add(event.id for event in events)
        for event in events:
            if event.span is not None:
                self._unsettled[event.span] = self._unsettled.get(event.span, 0) + 1
        for index, slot in enumerate(places[:jobs]):
            part = events[index * share : (index + 1) * share]
            if part:
                self.pool.hand(slot, Job(part, in_order=False))

    def hand_stream(self, stream: Stream, events: list[Claimed], slot: Slot, *, follows: bool = False) -> None:
        """Ordered mode: one stream's first events, to the slot taken before
        the claim (open_slots); or, ``follows``, the batch that follows the
        one running in ``slot``."""
        self.in_flight.add(event.id for event in events)
        self.pool.hand(slot, Job(events, in_order=True, follows=follows), stream)

    # -- collecting -------------------------------------------------------------------

    def collect(self, claimer: Claimer, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for reports and settle what they
        say; cut off handlers over --timeout. True if a job ended. Handled
        events are acknowledged before waiting, or once ACK_EVERY gathered;
        the stream batches that ended are settled together at the end."""
        ready = self.pool.wait(0)
        if not ready:
            self.acknowledge(claimer)
            ready = self.pool.wait(min(timeout, WAIT_SLICE, self._until_overdue()))
        elif len(self._handled) >= ACK_EVERY:
            self.acknowledge(claimer)
        ended = False
        try:
            for slot in ready:
                reports = self.pool.receive(slot)
                if reports is None:
                    pid, reason = slot.process.pid, self.pool.reason(slot)
                    if slot.job is not None and not slot.recycled:
                        log.warning("%s (pid %s); starting a new one", reason, pid)
                    ended = self._abort(claimer, slot, reason, time.monotonic() - slot.heard) or ended
                elif slot.job is not None:
                    ended = self._record(claimer, slot, reports) or ended
            ended = self._cut_off_overdue(claimer) or ended
        except BaseException:
            # The batches that ended before the error are settled, as they
            # were when each was settled at once; the error is raised.
            with contextlib.suppress(Exception):
                self._settle_streams(claimer)
            raise
        self._settle_streams(claimer)
        return ended

    def acknowledge(self, claimer: Claimer) -> None:
        """Acknowledge the handled events, together, and give back the spans
        whose events are all settled."""
        if not self._handled and not self._settled_spans:
            return
        ids, self._handled = self._handled, []
        spans, self._settled_spans = self._settled_spans, []
        try:
            self._settle(claimer, lambda: claimer.ack(ids, spans))
        except BaseException:
            # Tried again with the next acknowledgement (a claimer that
            # reconnects keeps its dispatcher). Dropped, a span would stay:
            # the heartbeat renews every lease its holder has.
            self._handled[:0], self._settled_spans[:0] = ids, spans
            raise
        self.in_flight.discard(ids)

    def _settle(self, claimer: Claimer, settle: Callable[[], T]) -> T:
        """Run ``settle`` (a Claimer settlement) apart from the heartbeat,
        again after each conflict. A row another transaction holds is waited
        for as long as that transaction lasts (an isql session that changed
        an event and did not commit), but a second at a time: between tries
        the heartbeat renews our leases, ``lockouts`` records the wait and
        ``waiting`` is told (the worker stamps its progress, warns, and ends
        the wait when it stops: the conflict is raised then)."""
        backoff = Backoff(0.04, 1.0)
        while True:
            try:
                with self.in_flight.settling:
                    result = settle()
            except DatabaseError as exc:
                if not is_conflict(exc):
                    raise
                claimer.lockouts.observe([SETTLING], [SETTLING])
                if not self.waiting(claimer):
                    raise
                time.sleep(backoff.next_pause())
                continue
            claimer.lockouts.observe([SETTLING], ())
            return result

    def _record(self, claimer: Claimer, slot: Slot, reports: list[Report]) -> bool:
        """Take in a slot's reports, in order; True if a job ended with them."""
        ended = False
        for report in reports:
            job = slot.job
            assert job is not None
            event = job.events[slot.reported]
            slot.reported += 1
            if report.started:  # one that is not is pending again once its job is settled
                if report.error is None:
                    slot.done.append(event.id)
                    self._observe(event, "handled", report.seconds)
                else:
                    self._failed(claimer, event, report)
            if slot.reported == len(job.events):
                self._finish(claimer, slot)
                ended = True
        return ended

    def _until_overdue(self) -> float:
        """Seconds until the first running handler is over --timeout."""
        heard = [slot.heard for slot in self.pool.busy()]
        return max(min(heard) + self.options.timeout - time.monotonic(), 0.0) if heard else WAIT_SLICE

    def _cut_off_overdue(self, claimer: Claimer) -> bool:
        """Kill the processes whose handler runs over --timeout; their events
        fail, the other processes go on. True if one was."""
        ended = False
        for slot in self.pool.busy():
            if time.monotonic() - slot.heard <= self.options.timeout:
                continue
            reports = self.pool.receive(slot)  # what it finished just before
            if reports and self._record(claimer, slot, reports):
                ended = True
                continue
            if slot.running is None or time.monotonic() - slot.heard <= self.options.timeout:
                continue
            self.pool.kill(slot)
            reports = self.pool.receive(slot)  # what it sent before it was killed
            if reports:
                ended = self._record(claimer, slot, reports) or ended
            _, running = slot.cut_off()
            log.error(
                "handler ran over --timeout (%gs) on event(s) %s; killed its process pid %s",
                self.options.timeout,
                ", ".join(f"{event.id} ({event.tag})" for event in running) or "(none left)",
                slot.process.pid,
            )
            ended = self._abort(claimer, slot, f"timed out after {self.options.timeout:g}s", self.options.timeout)
        return ended

    def _abort(self, claimer: Claimer, slot: Slot, error: str, seconds: float) -> bool:
        """A slot's process is gone: the events of the call it was in fail;
        those it handled whose reports went with it have their attempt
        counted and come again (their outcome is not known); the rest of its
        jobs were never started; a fresh process takes the slot. True if it
        had a job."""
        had_job = bool(slot.queue)
        try:
            lost, running = slot.cut_off()
            if lost:
                self._settle(claimer, lambda: claimer.count_attempts([event.id for event in lost]))
            slot.reported += len(lost) + len(running)
            for event in running:
                self._failed(claimer, event, Report(event.id, error, seconds))
            while slot.queue:
                self._finish(claimer, slot)
        finally:
            self.pool.replace(slot)
        return had_job

    def _finish(self, claimer: Claimer, slot: Slot) -> None:
        """Settle the slot's running job, ended or cut off: handled events
        are acknowledged together (in parallel mode with others; in ordered
        mode with the stream's earlier batches once its lease is given
        back or ACK_EVERY gathered, so a busy stream commits a settle per
        few batches, not per batch, and with the other streams' batches
        that ended in the same collect); events not started are pending again
        once their lease is given back (the attempt did not happen); the
        process goes on with its next job."""
        job, stream = slot.job, slot.stream
        assert job is not None
        ids = [event.id for event in job.events]
        done = slot.done
        slot.next_job()
        if stream is None:
            self._came_back = self._came_back or len(done) < len(ids)
            self._handled.extend(done)
            self.in_flight.discard(set(ids) - set(done))
            self._settle_spans(job.events)
            return
        handled = self._settled_heads.pop(stream, []) + done
        followed = any(queued == stream for _, queued in slot.queue)
        if followed and len(handled) < ACK_EVERY:
            self._settled_heads[stream] = handled
            self.in_flight.discard(ids)
            return
        self._settling.append(Settlement(stream, handled, release=not followed))
        self._settling_ids.extend(ids)

    def _settle_streams(self, claimer: Claimer) -> None:
        """Settle the stream batches that ended since the last time, in one
        transaction: busy streams that end together cost one commit."""
        if not self._settling:
            return
        settlements, self._settling = self._settling, []
        ids, self._settling_ids = self._settling_ids, []
        try:
            self._settle(claimer, lambda: claimer.settle_heads(settlements))
        finally:
            self.in_flight.discard(ids)

    def _settle_spans(self, events: list[Claimed]) -> None:
        """Count ``events`` settled in their spans; a span with none left is
        given back with the next acknowledgement, after its handled events."""
        for event in events:
            if event.span is None:
                continue
            self._unsettled[event.span] -= 1
            if not self._unsettled[event.span]:
                del self._unsettled[event.span]
                self._settled_spans.append(event.span)

    def _failed(self, claimer: Claimer, event: Claimed, report: Report) -> None:
        """Record a failed attempt: retried by backoff (or after the delay
        its handler asked for, when longer), or dead after the last attempt
        or when its handler said no attempt can work."""
        assert report.error is not None
        error, seconds = report.error, report.seconds
        dead = self.options.goes_dead(event.attempt, report.undeliverable)
        delay = 0.0 if dead else max(self.options.retry_delay(event.attempt), report.retry_after or 0.0)
        if not dead:
            heapq.heappush(self._retries_due, time.monotonic() + delay)
        self._settle(claimer, lambda: claimer.fail(event.id, error, max(delay - RETRY_MARGIN, 0.0), dead))
        self._observe(event, "dead" if dead else "failed", seconds)
        if dead:
            log.error("event %s (%s) is dead after %s attempt(s): %s", event.id, event.tag, event.attempt, error)
        else:
            log.warning(
                "event %s (%s) attempt %s failed: %s; retrying in %.1fs",
                event.id,
                event.tag,
                event.attempt,
                error,
                delay,
            )

    def _observe(self, event: Claimed, outcome: str, seconds: float) -> None:
        self.metrics.observe(event.tag, outcome, seconds, event.subscription_id)
        self.batch.observe(event.tag, seconds)
