"""Processes as Linux's /proc shows them: which program a pid runs, and
whether it is stopped or a zombie (pidfiles, the engine's stopped sharers)."""

from __future__ import annotations


def cmdline(pid: int) -> list[str] | None:
    """The argv of ``pid``, or None when it is gone or hidden from us."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            raw = file.read()
    except OSError:
        return None
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]] or None


def state(pid: int) -> str | None:
    """The state letter of ``pid`` (R, S, T for stopped, Z for a zombie...),
    or None when it is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None
