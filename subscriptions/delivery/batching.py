"""How many events a worker claims at once (``subs listen --batch``).

Every claim and every acknowledgement is a commit, and with quick handlers the
commits are what limits throughput. With slow handlers a large batch only
keeps events waiting behind each other (in parallel mode: away from idle
workers) and brings more of them back when a worker dies. So ``--batch auto``
sizes each claim to about BATCH_SECONDS of handler time, as measured so far
per tag: a no-op handler gets MAX_AUTO events per claim, a 25 ms webhook four.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_AUTO = 100
BATCH_SECONDS = 0.1
# Weight of the newest handler time in the running estimate.
SMOOTHING = 0.2


class BatchSize:
    """A fixed claim size, or (``fixed=None``) one that follows handler times."""

    def __init__(self, fixed: int | None) -> None:
        self.fixed = fixed
        self.seconds_per_event: dict[str, float] = {}

    def observe(self, tag: str, seconds: float) -> None:
        """One event of ``tag`` took ``seconds`` in its handler."""
        estimate = self.seconds_per_event.get(tag)
        self.seconds_per_event[tag] = seconds if estimate is None else estimate + SMOOTHING * (seconds - estimate)

    def size(self, tags: Iterable[str]) -> int:
        """Events to claim next for these tags: sized for the slowest handler
        among them; 1 until one of their events has been handled."""
        if self.fixed is not None:
            return self.fixed
        known = [self.seconds_per_event[tag] for tag in tags if tag in self.seconds_per_event]
        if not known:
            return 1
        return max(1, min(MAX_AUTO, int(BATCH_SECONDS / max(max(known), 1e-6))))
