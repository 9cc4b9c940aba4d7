"""Running ``subs listen`` in the background: pidfile, detach, stop, systemd unit.

The embedded Firebird engine hangs in a process that forks after loading it,
so this module imports neither firebird nor subscriptions.db/runtime, and
``detach()`` must run before the first database attachment.

Which processes count as subs (for ``stop`` and for pidfile liveness): those
whose /proc/PID/cmdline has a program named ``subs`` (the console script, run
directly or through its interpreter), or a ``python*`` interpreter with an
argument exactly ``subscriptions`` (``python -m subscriptions listen``).
A pidfile naming a running process that is not subs is treated as stale: its
pid was reused after a crash.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import sys
import tempfile
import time
from types import FrameType

from .errors import SubsError
from .logs import open_append

_PLAIN_ARGUMENT = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def _cmdline(pid: int) -> list[str] | None:
    """The argv of ``pid``, or None when it is gone or hidden from us."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            raw = file.read()
    except OSError:
        return None
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]] or None


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
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            state = file.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


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
        if not re.fullmatch(r"[0-9]+", text.strip()) or int(text) <= 1:
            raise SubsError(
                f"pidfile {self.path} does not hold a pid ({text.strip()[:20]!r}); "
                "remove it if subs is not running"
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
        argv = _cmdline(pid)
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


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def detach(*, pidfile: str, logfile: str) -> None:
    """Continue in a background daemon; the calling process prints the daemon's
    pid and exits 0 once the pidfile is written, or raises SubsError.

    Returns only in the daemon: double fork + setsid (no controlling terminal),
    cwd kept (relative database paths keep working), umask 0o027, stdin from
    /dev/null, stdout/stderr appended to ``logfile`` (0o600). The pidfile is
    removed at exit; if SIGTERM still has its default action it becomes
    SystemExit so that removal runs (a listener may install its own handler).
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
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
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
    argv = _cmdline(pid)
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
                f"subs (pid {pid}) is still running {timeout:g}s after SIGTERM; run `subs stop "
                f"--pidfile {pidfile}` again or `kill -KILL {pid}` to force it"
            )
        time.sleep(0.05)
    pids.remove(pid)
    return pid


def _quote(argument: str) -> str:
    """One ExecStart word, quoted the way systemd.service(5) unquotes it."""
    escaped = argument.replace("%", "%%").replace("$", "$$")
    if _PLAIN_ARGUMENT.fullmatch(argument):
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def _path_setting(value: str) -> str:
    """An absolute path for WorkingDirectory=/EnvironmentFile=, with % escaped."""
    if "\n" in value:
        raise ValueError(f"path {value!r} contains a newline")
    return os.path.abspath(value).replace("%", "%%")


def systemd_unit(
    *,
    executable: str,
    arguments: list[str],
    working_directory: str,
    environment_file: str,
    user: str | None = None,
) -> str:
    """A systemd service running ``executable arguments`` in the foreground.

    Credentials belong in ``environment_file`` (ISC_USER, ISC_PASSWORD, ...):
    unit files are world-readable, so a ``--password`` argument is refused.
    """
    if any("--password" in argument for argument in arguments):
        raise ValueError("do not put --password in a unit file; set ISC_PASSWORD in the environment file")
    if not os.path.isabs(executable):
        raise ValueError(f"executable {executable!r} must be an absolute path")
    if user is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*", user):
        raise ValueError(f"invalid user name {user!r}")
    lines = [
        "[Unit]",
        "Description=subs listener",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(_quote(word) for word in [executable, *arguments]),
        f"WorkingDirectory={_path_setting(working_directory)}",
        f"EnvironmentFile=-{_path_setting(environment_file)}",
        *([f"User={user}"] if user else []),
        "Restart=on-failure",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=60",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"
