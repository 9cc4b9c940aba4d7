"""A process stopped while it holds the embedded engine's initialization lock
(docs/FIREBIRD-BUGS.md, 12): every attach of every process sharing its lock
directory waits, whatever the database, for as long as it stays stopped.
subs cannot end that wait, but Ctrl-C and SIGTERM still end a command, and a
listener, within seconds, and a claimer's stall names the stopped process."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from subscriptions.cli.stopping import ENGINE_WAIT
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery.supervisor import EMBEDDED_STALL, embedded_stall_hint

from conftest import EMBEDDED, another_database, credentials, wait_until
from listening import Listener
from processes import interrupt, state

pytestmark = pytest.mark.parametrize("engine", [EMBEDDED])

ATTACH_AND_DETACH = """
import sys
from subscriptions.db.connection import open_connection
from subscriptions.db.runtime import load
from subscriptions.db.settings import ConnectionSettings
load()
print("loaded", flush=True)
while True:
    open_connection(ConnectionSettings(sys.argv[1])).close()
"""
STUCK = f"the database engine did not shut down within {ENGINE_WAIT:g} s"


def _fb_init_locks() -> list[tuple[str, int]]:
    """(kind, pid) of the flocks on the lock directory's fb_init: kind "held",
    or "waiting" for one blocked on it."""
    inode = os.stat(Path(os.environ["FIREBIRD_LOCK"], "fb_init")).st_ino
    found = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        waiting = fields[1] == "->"
        pid, device_inode = fields[5:7] if waiting else fields[4:6]
        if device_inode.endswith(f":{inode}"):
            found.append(("waiting" if waiting else "held", int(pid)))
    return found


@contextlib.contextmanager
def fb_init_held(settings: ConnectionSettings) -> Iterator[int]:
    """A process that attaches to ``settings``'s database and detaches, over
    and over, stopped (SIGSTOP) at a moment it holds fb_init; yields its pid,
    killed at the end."""
    holder = subprocess.Popen(
        [sys.executable, "-c", ATTACH_AND_DETACH, settings.dsn],
        env={**os.environ, **credentials(settings)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        holder.stdout.readline()
        for _ in range(2000):
            time.sleep(random.uniform(0.0, 0.01))
            os.kill(holder.pid, signal.SIGSTOP)
            wait_until(lambda: state(holder.pid) == "T", 5, "the process to stop")
            if ("held", holder.pid) in _fb_init_locks():
                break
            os.kill(holder.pid, signal.SIGCONT)
        else:
            raise AssertionError("the process never held fb_init when stopped")
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def _waits_for_fb_init(pid: int) -> bool:
    return ("waiting", pid) in _fb_init_locks()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_command_waiting_to_attach_ends_on_a_stop(settings, stop: signal.Signals) -> None:
    """The command waits in its attach, in the engine, where no Python runs:
    neither Ctrl-C nor SIGTERM ended it, for as long as the other process
    stayed stopped."""
    with fb_init_held(another_database(settings)), interrupt(signal.SIG_DFL):
        status = subprocess.Popen(
            [sys.executable, "-m", "subscriptions", "-d", settings.dsn, "status"],
            env={**os.environ, **credentials(settings)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(lambda: _waits_for_fb_init(status.pid), what="`subs status` to wait for fb_init")
        status.send_signal(stop)
        said, complained = status.communicate(timeout=60)
    assert (status.returncode, said) == (1, "")
    assert complained.startswith(f"Error: stopped by {stop.name}, but {STUCK}"), complained
    assert complained.endswith("what it had not committed is rolled back\n") and complained.count("\n") == 1


def test_a_listener_stops_while_the_engine_holds_its_attaches(items, tmp_path: Path) -> None:
    """Its claimer serves on, on its attachment; but its last statistics, and
    the engine's shutdown, wait to attach. It logged that it stopped, then
    never ended."""
    listener = Listener(items, tmp_path, "--grace", "1")
    try:
        listener.wait_serving()
        with fb_init_held(another_database(items)):
            listener.process.send_signal(signal.SIGTERM)
            assert listener.finish(60) == 0
    finally:
        listener.stop()
    said = listener.output()
    assert "could not record the last statistics" in said, said
    assert f"note: {STUCK}" in said, said


def test_a_stalled_claimer_names_the_stopped_process_the_engine_may_wait_for(items) -> None:
    """The log of a claimer's stall said only that a SIGKILLed process may
    hold the engine; a stopped process, which only its resumption or end
    lets go, is named. Not the stalled claimer itself: it is being killed."""
    assert embedded_stall_hint(None) == EMBEDDED_STALL
    with fb_init_held(another_database(items)) as holder:
        hint = embedded_stall_hint(None)
        assert embedded_stall_hint(holder) == EMBEDDED_STALL
    shown = f"; stopped, sharing this embedded engine's lock directory: {holder} ({sys.executable} -c import sys "
    assert hint.startswith(shown) and "\n" not in hint, hint
    assert "...); every process of its databases may wait for it" in hint, hint
    assert hint.endswith('until it is resumed (kill -CONT PID) or ended (docs/OPERATIONS.md, "The embedded engine")')
