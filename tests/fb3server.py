"""Starts, stops and restarts the Debian ``firebird3.0-server`` on 127.0.0.1:3050
for the tests. Needs root (CI and the developer machines run as root)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HOST, PORT = "127.0.0.1", 3050
PASSWORD_FILE = Path("/etc/firebird/3.0/SYSDBA.password")
CONFIG_FILE = Path("/etc/firebird/3.0/firebird.conf")
LOG_FILE = Path("/var/log/firebird/firebird3.0.log")
FBGUARD = "/usr/sbin/fbguard"
RUN_DIR = Path("/run/firebird3.0")
# What the guardian logs when the server died on its own (not stopped by us).
CRASHED = "terminated abnormally"
# Test processes (pytest-xdist workers, the soak) share one server: they
# start and stop it one at a time.
CONTROL_LOCK = Path(tempfile.gettempdir()) / "subs-tests-fb3-control.lock"


def listening() -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, PORT)) == 0


def password() -> str:
    text = PASSWORD_FILE.read_text()
    match = re.search(r'^ISC_PASSWORD="?([^"\n]*)"?', text, re.MULTILINE)
    if not match:
        raise RuntimeError(f"no ISC_PASSWORD in {PASSWORD_FILE}")
    return match.group(1)


def _wait(condition, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"Firebird 3 server did not {what} within {timeout:.0f}s")
        time.sleep(0.1)


def _bind_to_loopback() -> bool:
    """Pin the server to 127.0.0.1; True if the configuration changed.

    Debian ships ``RemoteBindAddress = localhost``, which binds ::1 only on hosts
    whose resolver lists the IPv6 loopback first, so 127.0.0.1:3050 never answers.
    """
    text = CONFIG_FILE.read_text()
    wanted = f"RemoteBindAddress = {HOST}"
    active = re.compile(r"^[ \t]*RemoteBindAddress[ \t]*=.*$", re.MULTILINE)
    if active.search(text):
        updated = active.sub(wanted, text, count=1)
    else:
        updated = text.rstrip("\n") + f"\n{wanted}\n"
    if updated == text:
        return False
    CONFIG_FILE.write_text(updated)
    return True


def _log_tail(lines: int = 6) -> str:
    try:
        entries = [line.strip() for line in LOG_FILE.read_text().splitlines() if line.strip()]
    except OSError:
        return "(no server log)"
    return " | ".join(entries[-lines:])


@contextlib.contextmanager
def _controlling() -> Iterator[None]:
    with CONTROL_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def start() -> None:
    with _controlling():
        _start()


def _start() -> None:
    if not Path(FBGUARD).exists():
        raise RuntimeError("firebird3.0-server is not installed; run ./dev.sh test")
    if _bind_to_loopback():
        _stop()
    if listening():
        return
    if _pids("fbguard"):
        # Started by the package's postinst a moment ago; give it time, else replace it.
        try:
            _wait(listening, "start listening", timeout=10)
            return
        except RuntimeError:
            _stop()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    shutil.chown(RUN_DIR, "firebird", "firebird")
    guard = subprocess.run(
        ["su", "-s", "/bin/sh", "firebird", "-c", f"{FBGUARD} -daemon -forever"],
        env=_server_environment(),
        capture_output=True,
        text=True,
    )
    if guard.returncode != 0:
        raise RuntimeError(
            f"fbguard exited {guard.returncode} ({guard.stderr.strip() or 'no output'}); server log: {_log_tail()}"
        )
    try:
        _wait(listening, "start listening")
    except RuntimeError as error:
        raise RuntimeError(f"{error}; server log: {_log_tail()}") from None


def _server_environment() -> dict[str, str]:
    """Our environment without Firebird's variables. Once the tests have used
    the embedded engine, FIREBIRD names its runtime root under /root, and a
    server started with it cannot read its firebird.conf ("startup error")."""
    return {name: value for name, value in os.environ.items() if not name.startswith(("FIREBIRD", "ISC_"))}


def _pids(name: str) -> list[int]:
    """Pids of processes whose executable is ``name`` (found by /proc, never by pkill)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "exe")).name == name:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _terminate(name: str) -> None:
    for pid in _pids(name):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    _wait(lambda: not _pids(name), f"stop {name}")


def stop() -> None:
    with _controlling():
        _stop()


def _stop() -> None:
    """The guardian first, so that it cannot start a new server behind our back."""
    _terminate("fbguard")
    _terminate("firebird")
    _wait(lambda: not listening(), "stop listening")


def restart() -> None:
    with _controlling():
        _stop()
        _start()


def log_size() -> int:
    try:
        return LOG_FILE.stat().st_size
    except OSError:
        return 0


def crash_since(offset: int) -> str | None:
    """The server log written since ``offset`` (from ``log_size``) if the server
    crashed meanwhile, else None. The guardian restarts a crashed server."""
    try:
        with LOG_FILE.open("rb") as log:
            log.seek(offset if offset <= LOG_FILE.stat().st_size else 0)
            text = log.read().decode(errors="replace")
    except OSError:
        return None
    if CRASHED not in text:
        return None
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def database_dir() -> Path:
    """A fresh directory the server's ``firebird`` user can create files in."""
    path = Path(tempfile.mkdtemp(prefix="subs-fb3-"))
    shutil.chown(path, "firebird", "firebird")
    return path
