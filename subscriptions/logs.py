"""Logging setup for ``subs listen``: human text or one JSON object per line.

JSON lines are what log shippers (journald exporters, Loki, ELK) ingest
without a parsing rule; ``extra=`` fields become top-level keys so a handler
can log ``extra={"tag": tag, "event_id": n}`` and have them searchable.
"""

from __future__ import annotations

import datetime
import faulthandler
import io
import json
import logging
import logging.handlers
import os
import sys
from typing import TextIO

from subscriptions.errors import SubsError

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime", "taskName"}
)

# Handlers installed by the last configure(), so a second call replaces only ours.
_installed: list[logging.Handler] = []
# The logfile faulthandler writes to: it keeps only the descriptor, so we keep the file.
_crash_report: list[TextIO] = []


def open_append(path: str) -> int:
    """Open ``path`` for appending, creating it readable by its owner only:
    logs can hold row data, which other local users should not read."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise _cannot_open(path, exc) from None


def append_text(path: str, encoding: str | None = "utf-8") -> io.TextIOWrapper:
    """``open_append`` as a text file (a file that cannot be appended to as
    one, such as one of /proc, is refused like one that cannot be opened)."""
    descriptor = open_append(path)
    try:
        return os.fdopen(descriptor, "a", encoding=encoding)
    except OSError as exc:
        os.close(descriptor)
        raise _cannot_open(path, exc) from None


def _cannot_open(path: str, exc: OSError) -> SubsError:
    return SubsError(f"cannot open logfile {path}: {exc.strerror or exc}; choose another --logfile")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, process, extras, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        entry.update((key, value) for key, value in vars(record).items() if key not in _STANDARD_ATTRS)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class _PrivateFileHandler(logging.handlers.WatchedFileHandler):
    """Appends to the logfile, created with mode 0o600 (see open_append), and
    opens it again once it was moved or removed: logrotate's default way
    (rename, then a new file) needs no signal and no copytruncate."""

    def _open(self) -> io.TextIOWrapper:
        return append_text(self.baseFilename, self.encoding)


# The levels the commands' --log-level offers.
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def configure(*, level: str = "INFO", fmt: str = "text", logfile: str | None = None) -> None:
    """Send the root logger's records to ``logfile`` (appended) or stderr.

    Calling it again replaces the handlers of the previous call and leaves any
    other handler (pytest's, an embedding application's) alone. Worker
    processes must call it themselves with the same arguments.
    """
    levels = logging.getLevelNamesMapping()
    if level.upper() not in levels:
        raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
    elif fmt == "text":
        formatter = logging.Formatter(TEXT_FORMAT)
    else:
        raise ValueError(f"unknown log format {fmt!r}; use one of {', '.join(FORMATS)}")
    handler: logging.Handler = (
        _PrivateFileHandler(logfile, encoding="utf-8") if logfile else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in _installed:
        root.removeHandler(old)
        old.close()
    _installed[:] = [handler]
    root.addHandler(handler)
    root.setLevel(levels[level.upper()])
    _report_crashes(logfile)


def _report_crashes(logfile: str | None) -> None:
    """Have a crash in native code write every thread's Python stack where the
    logs go. The embedded Firebird engine runs inside our processes and can
    crash after another process of the database was SIGKILLed
    (tests/SOAK-NOTES.md, finding 8); the log line about the dead worker only
    names the signal, and the stack is what a bug report needs."""
    report: TextIO = append_text(logfile) if logfile else sys.stderr
    try:
        faulthandler.enable(file=report, all_threads=True)
    except (AttributeError, OSError, ValueError):  # captured output (click's runner) has no descriptor
        if logfile:
            report.close()
        return
    for opened in _crash_report:
        opened.close()
    _crash_report[:] = [report] if logfile else []
