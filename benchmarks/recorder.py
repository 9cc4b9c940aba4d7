"""The benchmark handler plugin, loaded by ``subs listen --plugin`` from this file.

It handles the tag ``bench``: sleeps for the row's SLEEP_MS (W2's slow
handlers; 0 elsewhere) and appends one line per event, with the monotonic
clock (system-wide, so comparable with the benchmark process) at its start
and finish, to a file per worker process in $BENCH_RECORD_DIR (if set).
The tag ``bench_nats`` (W7) is the built-in nats relay, recorded the same
way: every event of a batch with the batch's start and finish.
One small unbuffered write per event keeps the cost out of the figures, and
nothing is lost when the worker leaves with os._exit.
"""

from __future__ import annotations

import os
import time

from subscriptions import hookimpl

_files: dict[int, int] = {}


@hookimpl
def register_handlers(register, config):
    register("bench", handle)
    register("bench_nats", lambda events: relay(events, config), batch=True)


def relay(events, config):
    from subscriptions.builtin import nats_relay

    started = time.monotonic_ns()
    errors = nats_relay.relay(events, config)
    finished = time.monotonic_ns()
    for event, error in zip(events, errors):
        if error is None:
            _record(f"{event.id} {event.pk['ID']} {event.attempt} {started} {finished}\n")
    return errors


def handle(event) -> None:
    started = time.monotonic_ns()
    sleep_ms = (event.new or {}).get("SLEEP_MS") or 0
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    _record(f"{event.id} {event.pk['ID']} {event.attempt} {started} {time.monotonic_ns()}\n")


def _record(line: str) -> None:
    directory = os.environ.get("BENCH_RECORD_DIR")
    if not directory:
        return
    pid = os.getpid()
    if pid not in _files:
        _files[pid] = os.open(os.path.join(directory, f"{pid}.rec"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(_files[pid], line.encode())
