"""Where a test hung: pytest-timeout ends a test that reaches its bound with
os._exit, after printing every thread's stack. Under pytest-xdist that print
is lost with the worker ("node down: Not properly terminated", then a rerun),
so nothing says where the test waited. Each test process therefore also has
faulthandler write every thread's stack to a file of its own a moment before
the bound, and the controlling process prints those files at the end."""

from __future__ import annotations

import faulthandler
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO

import pytest

DIRECTORY = "SUBS_TEST_HANGS"  # environment variable: the files' directory
AHEAD = 2.0  # seconds before pytest-timeout's bound
_dump: IO[str] | None = None


def configure(config: pytest.Config) -> None:
    """In the controlling process: a directory for the test processes' files,
    inherited through the environment, removed when the run ends."""
    if hasattr(config, "workerinput") or DIRECTORY in os.environ:
        return
    directory = tempfile.mkdtemp(prefix="subs-test-hangs-")
    os.environ[DIRECTORY] = directory
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))


def arm(item: pytest.Item, timeout: float) -> None:
    """Name ``item`` in this process's file, and dump the stacks into it
    unless ``disarm`` comes first."""
    global _dump
    if timeout <= AHEAD or DIRECTORY not in os.environ:
        return
    if _dump is None:
        _dump = open(Path(os.environ[DIRECTORY]) / f"{os.getpid()}.txt", "w")  # kept open: faulthandler writes to it
    _dump.seek(0)
    _dump.truncate()
    _dump.write(f"{item.nodeid} reached its {timeout:g} s bound; its process's threads:\n")
    _dump.flush()
    faulthandler.dump_traceback_later(timeout - AHEAD, file=_dump)


def disarm() -> None:
    faulthandler.cancel_dump_traceback_later()


def report(config: pytest.Config, terminalreporter: pytest.TerminalReporter) -> None:
    """In the controlling process: print the stacks of every test that hung."""
    if hasattr(config, "workerinput") or DIRECTORY not in os.environ:
        return
    for path in sorted(Path(os.environ[DIRECTORY]).glob("*.txt")):
        text = path.read_text(errors="replace")
        if "\nTimeout (" in text:
            terminalreporter.write_sep("=", "a test hung (stacks written before pytest-timeout ended it)")
            terminalreporter.write(text)
