"""Pidfiles of background listeners, and telling a subs process from another.

Which processes count as subs (for ``stop`` and for pidfile liveness): those
whose /proc/PID/cmdline has a program named ``subs`` (the console script, run
directly or through its interpreter), or a ``python*`` interpreter with an
argument exactly ``subscriptions`` (``python -m subscriptions listen``).
A pidfile naming a running process that is not subs is treated as stale: its
pid was reused after a crash.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile

from subscriptions.db.processes import cmdline, state
from subscriptions.errors import SubsError

# The kernel's bound on pids (kernel.pid_max cannot be set higher).
PID_MAX_LIMIT = 4_194_304


def is_subs(argv: list[str]) -> bool:
    """Whether a command line is a subs process (rule in the module docstring)."""
    names = [os.path.basename(arg) for arg in argv]
    if names and names[0] == "subs":
        return True
    is_python = bool(names) and names[0].startswith("python")
    return is_python and ("subs" in names or "subscriptions" in argv[1:])


def is_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return state(pid) not in ("Z", "X")  # None, unreadable: taken as alive


class PidFile:
    """A pidfile that is written atomically and removed only by its owner."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> int | None:
        """The pid in the file, None if there is no file; SubsError if it holds no pid."""
        try:
            with open(self.path, encoding="ascii", errors="replace") as file:
                text = file.read(64)
        except FileNotFoundError:
            return None
        except OSError as exc:
            reason = exc.strerror or exc
            raise SubsError(f"cannot read pidfile {self.path}: {reason}; check its permissions") from None
        if not re.fullmatch(r"[0-9]{1,7}", text.strip()) or not 1 < int(text) <= PID_MAX_LIMIT:
            raise SubsError(
                f"pidfile {self.path} does not hold a pid ({text.strip()[:20]!r}); remove it if subs is not running"
            )
        return int(text)

    def running_pid(self) -> int | None:
        """The pid of the subs process this file names, or None if it names none."""
        try:
            pid = self.read()
        except SubsError:
            return None
        if pid is None or not is_alive(pid):
            return None
        argv = cmdline(pid)
        return pid if argv is None or is_subs(argv) else None

    def check(self) -> None:
        """Refuse (SubsError) when the file names a running subs process."""
        pid = self.running_pid()
        if pid is not None and pid != os.getpid():
            raise SubsError(
                f"subs is already running with pid {pid} (pidfile {self.path}); "
                f"stop it with `subs stop --pidfile {self.path}`"
            )

    def create(self, pid: int | None = None) -> None:
        """Write ``pid`` (default: ours) with mode 0o644, replacing a stale file:
        one naming a dead pid, a pid reused by another program, or no pid.

        The temp file + rename means readers never see a half-written pid.
        """
        self.check()
        directory, name = os.path.split(os.path.abspath(self.path))
        temp = None
        try:
            fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
            with os.fdopen(fd, "w", encoding="ascii") as file:
                os.fchmod(fd, 0o644)
                file.write(f"{pid or os.getpid()}\n")
                file.flush()
                os.fsync(fd)
            os.replace(temp, self.path)
        except OSError as exc:
            if temp:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
            reason = exc.strerror or exc
            raise SubsError(f"cannot write pidfile {self.path}: {reason}; choose another --pidfile") from None

    def remove(self, pid: int | None = None) -> None:
        """Delete the file if it still names ``pid`` (default: ours), so a newer
        listener's pidfile is never removed by an old one."""
        with contextlib.suppress(SubsError, FileNotFoundError):
            if self.read() == (pid or os.getpid()):
                os.unlink(self.path)
