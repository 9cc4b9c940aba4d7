"""The one retry schedule: growing pauses with jitter, for conflicts between
concurrent transactions and for reconnecting after a lost connection."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Backoff:
    """Pauses that double from ``first`` up to ``ceiling``; each is drawn
    between half and all of the current step, so retries spread out."""

    def __init__(self, first: float, ceiling: float) -> None:
        self.first = first
        self.ceiling = ceiling
        self.step = first

    def next_pause(self) -> float:
        pause = random.uniform(self.step / 2, self.step)
        self.step = min(self.step * 2, self.ceiling)
        return pause

    def reset(self) -> None:
        self.step = self.first


def retrying(
    work: Callable[[], T],
    *,
    attempts: int,
    retry_on: Callable[[Exception], bool],
    sleep: Callable[[float], object],
    backoff: Backoff,
) -> T:
    """``work()``, tried again after ``backoff``'s pause while it raises an
    exception ``retry_on`` accepts, at most ``attempts`` times in all."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except Exception as exc:
            if attempt == attempts or not retry_on(exc):
                raise
        sleep(backoff.next_pause())
    raise AssertionError("unreachable")
