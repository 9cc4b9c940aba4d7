"""Settings of one `subs listen` run, shared by the supervisor and its workers
(picklable, because workers are started with the spawn method)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from subscriptions.db.settings import ConnectionSettings

ORDERED, PARALLEL = "ordered", "parallel"
DEAD, BLOCK = "dead", "block"


@dataclass(frozen=True)
class ListenOptions:
    settings: ConnectionSettings
    mode: str = ORDERED
    workers: int = 1
    key_order: bool = False
    batch: int | None = None  # None: sized by handler times (batching.py)
    tags: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    handler_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    poll: float = 5.0
    lease: float = 30.0
    timeout: float = 60.0
    grace: float = 30.0
    handler_memory_limit: int | None = None  # MiB: a handler process that grew past it is replaced
    max_attempts: int = 10
    backoff_min: float = 1.0
    backoff_max: float = 300.0
    on_failure: str = DEAD
    drain: bool = False
    drain_patience: float = 60.0  # seconds a drain goes on while nothing but failures happen
    log_level: str = "INFO"
    log_format: str = "text"
    log_file: str | None = None

    def retry_delay(self, attempt: int) -> float:
        """Exponential backoff with jitter: between half and all of
        ``backoff_min * 2**(attempt-1)``, capped at ``backoff_max`` and never
        under ``backoff_min`` (what the options promise: so the first retry
        waits --backoff-min, and later ones spread)."""
        ceiling = min(self.backoff_max, self.backoff_min * 2 ** max(attempt - 1, 0))
        return random.uniform(max(self.backoff_min, ceiling / 2), ceiling)

    def goes_dead(self, attempt: int, undeliverable: bool = False) -> bool:
        """Whether a failed attempt makes its event dead: the last one
        allowed, or any that its handler called Undeliverable; never with
        --on-failure block."""
        return self.on_failure == DEAD and (undeliverable or attempt >= self.max_attempts)
