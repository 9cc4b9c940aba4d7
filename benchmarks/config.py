"""Workload sizes (full and --quick) and what every workload gets to run with."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .results import Recorder


@dataclass(frozen=True)
class Sizes:
    w1_events: int = 20_000
    w1_batch: int = 100
    workers: int = 4
    w2_events: int = 1_000
    w2_sleep_ms: tuple[int, int] = (10, 40)
    w3_events: int = 300
    w3_gap_ms: tuple[int, int] = (20, 40)
    w3_drain: int = 5_000
    w4_rows: int = 10_000
    w5_history: int = 1_000_000
    w5_claims: int = 300
    w5_events: int = 2_000
    w6_events: int = 150_000
    w6_batch: int = 100
    # A drain of 5,000 took under a second, and its repeats spread from
    # 0.58x to 1.03x of the no-op rate: each handler process connects to
    # NATS within the timed span, and the ends of a short drain weigh much.
    w7_events: int = 20_000
    w8_rows: int = 1_000_000
    w9_small: int = 1_000
    w9_large: int = 1_000_000
    w10_events: int = 3_000
    w11_rows: int = 2_000
    w12_events: int = 20_000
    w12_tables: int = 300
    w13_rows: int = 500
    w14_history: int = 100_000
    w14_events: int = 10_000


FULL = Sizes()
QUICK = Sizes(
    w1_events=300,
    w1_batch=20,
    w2_events=40,
    w3_events=15,
    w3_drain=200,
    w4_rows=300,
    w5_history=5_000,
    w5_claims=20,
    w5_events=100,
    w6_events=15_000,
    w6_batch=20,
    w7_events=200,
    w8_rows=2_000,
    w9_small=100,
    w9_large=2_000,
    w10_events=100,
    w11_rows=40,
    w12_events=100,
    w12_tables=10,
    w13_rows=20,
    w14_history=2_000,
    w14_events=100,
)


@dataclass
class Context:
    """Sizes, repeats and the shared recorder; ``time_limit`` caps each W1
    case run, the only ones whose full length grows with the product's speed
    (None: no cap)."""

    sizes: Sizes
    repeat: int
    time_limit: float | None
    workdir: Path
    recorder: Recorder

    def progress(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def deadline(limit: float | None) -> float:
    """The monotonic time at which a run starting now is cut off."""
    return time.monotonic() + limit if limit else float("inf")
