"""The soak's handler plugin: records every delivery in a file that survives SIGKILL.

Each attempt appends a "start" line before the handler does anything and a
"done" (or "fail") line after, each with one ``write()`` on an ``O_APPEND``
descriptor, so a kill can cut an attempt off between the lines but never
tear a line. The soak's end checks read this file to tell a justified
redelivery (an attempt cut off by a kill or a server restart) from a real
duplicate.

What a handler does is decided by the change number it carries, so a run is
reproducible: about one event in eight sleeps a few milliseconds (kills then
land mid-handler), and about one in 89 fails its first attempt (retries and,
in ordered mode, a held-back subscription are part of the soak).
"""

from __future__ import annotations

import json
import os
import time

from subscriptions import hookimpl
from subscriptions.events import Event

RECORD_ENV = "SOAK_RECORD"
TAGS = ("soak", "soak2")

_fd: int | None = None


def change_number(event: Event) -> int:
    """The change an event is about: a delete's is the one that wrote the deleted row."""
    values = event.old if event.action == "D" else event.new
    return int(values["CHANGE_NO"])


def sleeps(number: int) -> float:
    return 0.004 * (1 + number % 5) if number % 8 == 1 else 0.0


def fails_first_attempt(number: int) -> bool:
    return number % 89 == 7


def _record(line: dict) -> None:
    global _fd
    if _fd is None:
        _fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())


def handle(event: Event) -> None:
    number = change_number(event)
    base = {"e": event.id, "a": event.attempt, "p": os.getpid()}
    _record(
        {
            **base,
            "ph": "s",
            "t": time.time(),
            "s": event.subscription_id,
            "g": event.tag,
            "tb": event.table,
            "x": event.action,
            "k": number,
            "i": event.pk["ID"],
            "o": (event.old or {}).get("CHANGE_NO"),
        }
    )
    if sleeps(number):
        time.sleep(sleeps(number))
    if fails_first_attempt(number) and event.attempt == 1:
        _record({**base, "ph": "f", "t": time.time()})
        raise RuntimeError(f"soak: change {number} fails its first attempt")
    _record({**base, "ph": "d", "t": time.time()})


@hookimpl
def register_handlers(register) -> None:
    for tag in TAGS:
        register(tag, handle)
