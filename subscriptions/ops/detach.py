"""Running ``subs listen`` in the background (``--detach``) and stopping it.

The embedded Firebird engine hangs in a process that forks after loading it,
so this module imports nothing that loads it, and ``detach()`` must run
before the first database attachment.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time
from types import FrameType

from subscriptions.db.processes import cmdline
from subscriptions.errors import SubsError
from subscriptions.logs import open_append

from .pidfile import PidFile, is_alive, is_subs


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def detach(*, pidfile: str, logfile: str) -> None:
    """Continue in a background daemon; the calling process prints the daemon's
    pid and exits 0 once the pidfile is written, or raises SubsError.

    Returns only in the daemon: double fork + setsid (no controlling terminal),
    cwd kept (relative database paths keep working), umask 0o027, stdin from
    /dev/null, stdout/stderr appended to ``logfile`` (0o600). The pidfile is
    removed at exit, and SIGTERM becomes a quiet SystemExit so that removal
    runs, until the listener installs its own handler (the daemon's stop is
    not an error, whatever handler the command line had set).
    Call it before loading the Firebird engine and before starting threads.
    """
    pids = PidFile(os.path.abspath(pidfile))
    pids.check()
    log_fd = open_append(logfile)
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    try:
        child = os.fork()
    except OSError as exc:
        for fd in (read_end, write_end, log_fd):
            os.close(fd)
        raise SubsError(f"cannot start the background listener: {exc.strerror}") from None
    if child:
        os.close(write_end)
        os.close(log_fd)
        with os.fdopen(read_end, "rb") as pipe:
            report = pipe.read().decode(errors="replace")
        os.waitpid(child, 0)
        if not report.startswith("ok "):
            died = f"the background listener died while starting; see {logfile}"
            raise SubsError(report.removeprefix("error ") or died)
        print(f"subs listening in the background, pid {report[3:]} (log: {logfile})", flush=True)
        raise SystemExit(0)
    os.close(read_end)
    _daemonize(pids, log_fd, write_end)


def _daemonize(pids: PidFile, log_fd: int, report_fd: int) -> None:
    """The forked child's part of detach(). Any error is reported through the
    pipe and ends the child: it must never unwind into the caller's code."""
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        os.umask(0o027)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(devnull)
        os.close(log_fd)
        pids.create()
    except Exception as exc:
        os.write(report_fd, f"error {exc}".encode())
        os._exit(1)
    atexit.register(pids.remove, os.getpid())
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    os.write(report_fd, f"ok {os.getpid()}".encode())
    os.close(report_fd)


def stop(pidfile: str, *, timeout: float = 30.0) -> int:
    """SIGTERM the subs process named by ``pidfile``, wait for it to exit, return its pid."""
    pids = PidFile(pidfile)
    pid = pids.read()
    if pid is None:
        raise SubsError(f"no pidfile at {pidfile}; is subs running?")
    if not is_alive(pid):
        pids.remove(pid)
        raise SubsError(f"pidfile {pidfile} names pid {pid}, which is not running (stale pidfile removed)")
    argv = cmdline(pid)
    if argv is None or not is_subs(argv):
        shown = " ".join(argv)[:80] if argv else "unknown"
        raise SubsError(
            f"pidfile {pidfile} names pid {pid}, which is not subs ({shown}); "
            "not signalling it: remove the pidfile if subs is not running"
        )
    try:
        os.kill(pid, signal.SIGTERM)
    except PermissionError:
        raise SubsError(f"not allowed to signal pid {pid}; run `subs stop` as the user running it") from None
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while is_alive(pid):
        if time.monotonic() >= deadline:
            raise SubsError(
                f"subs (pid {pid}) is still running {timeout:g}s after SIGTERM, perhaps giving handlers their "
                f"--grace; wait with a longer --timeout, or run `subs stop --pidfile {pidfile}` again to kill "
                f"its handlers at once (`kill -KILL {pid}` if even that fails)"
            )
        time.sleep(0.05)
    pids.remove(pid)
    return pid
