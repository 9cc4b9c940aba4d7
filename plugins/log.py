"""Tag ``log``: writes each event as one JSON line.

Settings (``[handlers.log]`` in subs.toml):

``path``
    File the lines are appended to (created in a folder that must exist);
    standard output when not set.

Each line is ``Event.to_json()`` and is flushed at once, so ``tail -f`` and a
crash both see every delivered event.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from subscriptions import hookimpl
from subscriptions.config import check_setting_names, tables_using
from subscriptions.errors import SubsError
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


def _check_path(tag: str, path: object) -> None:
    """A path that cannot be written is a start-up error, not a failed
    attempt per event."""
    if path is None or path == "":
        return
    if not isinstance(path, str):
        raise SubsError(f"[handlers.{tag}] path must be a file name (a string), not {path!r}")
    file = Path(path).expanduser()
    folder = file.parent
    if not folder.is_dir():
        raise SubsError(f"[handlers.{tag}] path {path}: there is no folder {folder}; create it or choose another path")
    if file.is_dir():
        raise SubsError(f"[handlers.{tag}] path {path} is a folder; name a file in it")
    if not os.access(file if file.exists() else folder, os.W_OK):
        raise SubsError(f"[handlers.{tag}] path {path}: this user may not write there; choose another path")


@hookimpl
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, settings in tables_using("log", config).items():
        check_setting_names(tag, settings, "log", SETTINGS)
        _check_path(tag, settings.get("path"))
    register("log", lambda event: write(event, config.get(event.tag, {})))
