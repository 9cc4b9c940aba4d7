"""Tag ``log``: writes each event as one JSON line.

Settings (``[handlers.log]`` in subs.toml):

``path``
    File the lines are appended to; standard output when not set.

Each line is ``Event.to_json()`` and is flushed at once, so ``tail -f`` and a
crash both see every delivered event.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from subscriptions import hookimpl
from subscriptions.config import check_setting_names, tables_using
from subscriptions.events import Event

SETTINGS = ("path",)

_lock = threading.Lock()
"""One lock for every destination: lines from concurrent deliveries never interleave."""


def write(event: Event, settings: Mapping[str, Any]) -> None:
    """Append the event's JSON line to ``settings["path"]`` or standard output."""
    line = event.to_json() + "\n"
    path = settings.get("path")
    with _lock:
        if path:
            with Path(path).expanduser().open("a", encoding="utf-8") as file:
                file.write(line)
        else:
            sys.stdout.write(line)
            sys.stdout.flush()


@hookimpl
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, settings in tables_using("log", config).items():
        check_setting_names(tag, settings, "log", SETTINGS)
    register("log", lambda event: write(event, config.get(event.tag, {})))
