"""Exceptions of the public API: ``SubsError``, the one type the CLI turns
into a one-line error, and what a handler raises to say more than "this
attempt failed": ``RetryLater`` (not before a given time) and
``Undeliverable`` (never)."""

from __future__ import annotations

# A retry further out than this is a mistake (a date read as seconds, say):
# an event due a year from now looks lost to its operator.
MAX_RETRY_AFTER = 7 * 24 * 3600.0


class SubsError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""


class RetryLater(Exception):
    """Raised by a handler: this attempt failed, and the next must wait at
    least ``seconds`` (a receiver's Retry-After, a rate limit's reset), or
    the backoff's delay when that is longer. It counts as an attempt like
    any failure, so the event still goes dead after --max-attempts."""

    def __init__(self, message: str, seconds: float) -> None:
        if not 0 <= seconds <= MAX_RETRY_AFTER:
            raise ValueError(f"RetryLater needs 0 to {MAX_RETRY_AFTER:g} seconds, not {seconds!r}")
        super().__init__(message)
        self.seconds = float(seconds)


class Undeliverable(Exception):
    """Raised by a handler: this event can never be delivered as it is (a
    receiver refused its content for good, say), so it goes dead now
    instead of using up its attempts; ``subs retry`` brings it back once
    what was wrong is fixed. With --on-failure block, where nothing goes
    dead, it is retried like any failure."""
