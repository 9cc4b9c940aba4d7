"""Where a test hung: pytest-timeout ends a test that reaches its bound with
os._exit, after printing every thread's stack. Under pytest-xdist that print
is lost with the worker ("node down: Not properly terminated", then a rerun),
so nothing says where the test waited. Each test process therefore also has
faulthandler write every thread's stack to a file of its own a moment before
the bound, and the controlling process prints those files at the end.

Then, still before the bound, the test process kills every process it
started: a hung test's listeners would otherwise outlive it for the rest of
the run. In a CI run, after a test process was ended so, every database
creation sharing its lock directory failed for 42 tests ("Timeout when
waiting callback from other process": some process of the engine no longer
answered)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from processes import cmdline, descendants

DIRECTORY = "PYTEST_SUBS_HANGS"  # environment variable: the files' directory
AHEAD = 2.0  # seconds before pytest-timeout's bound: the stacks
KILL_AHEAD = 1.0  # seconds before it: the test's processes are killed
_dump: IO[str] | None = None
_killer: threading.Timer | None = None


def configure(config: pytest.Config) -> None:
    """In the controlling process: a directory for the test processes' files,
    inherited through the environment, removed when the run ends."""
    if hasattr(config, "workerinput") or DIRECTORY in os.environ:
        return
    directory = tempfile.mkdtemp(prefix="subs-test-hangs-")
    os.environ[DIRECTORY] = directory
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))


def arm(item: pytest.Item, timeout: float) -> None:
    """Name ``item`` in this process's file, then dump the stacks into it
    and kill the processes this one started, unless ``disarm`` comes first."""
    global _dump, _killer
    if timeout <= AHEAD or DIRECTORY not in os.environ:
        return
    if _dump is None:
        _dump = open(Path(os.environ[DIRECTORY]) / f"{os.getpid()}.txt", "w")  # kept open: faulthandler writes to it
    _dump.seek(0)
    _dump.truncate()
    _dump.write(f"{item.nodeid} reached its {timeout:g} s bound; its process's threads:\n")
    _dump.flush()
    faulthandler.dump_traceback_later(timeout - AHEAD, file=_dump)
    _killer = threading.Timer(timeout - KILL_AHEAD, _kill_started_processes, args=(_dump,))
    _killer.daemon = True
    _killer.start()


def disarm() -> None:
    faulthandler.cancel_dump_traceback_later()
    if _killer is not None:
        _killer.cancel()


def _kill_started_processes(dump: IO[str]) -> None:
    """SIGKILL every process this test process started, and name them after
    the stacks in ``dump``. The file then gets a name of its own: a test that
    waited on a process fails as it dies, before its bound, and the next
    test's ``arm`` would have emptied the file (probably why a quick run of
    the benchmarks that died of SIGKILL in a CI run showed no stacks)."""
    global _dump
    killed = []
    for pid in descendants(os.getpid()):
        command = cmdline(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(f"  {pid} {command}\n")
    dump.seek(0, os.SEEK_END)  # past faulthandler's stacks, written to the same file
    dump.write(f"killed the processes it had started: {len(killed)}\n{''.join(killed)}")
    dump.flush()
    os.rename(dump.name, Path(os.environ[DIRECTORY]) / f"{os.getpid()}-killed-{time.monotonic_ns()}.txt")
    _dump = None  # the next test's arm opens a new file; faulthandler keeps this one until then


def report(config: pytest.Config, terminalreporter: pytest.TerminalReporter) -> None:
    """In the controlling process: print the stacks of every test that hung."""
    if hasattr(config, "workerinput") or DIRECTORY not in os.environ:
        return
    for path in sorted(Path(os.environ[DIRECTORY]).glob("*.txt")):
        text = path.read_text(errors="replace")
        if "\nTimeout (" in text:
            terminalreporter.write_sep("=", "a test hung (stacks written before pytest-timeout ended it)")
            terminalreporter.write(text)
