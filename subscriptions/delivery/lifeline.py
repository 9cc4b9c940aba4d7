"""Processes that die with their parent, and a parent that reaps what its
dead children leave: a SIGKILLed listener must not leave its claimer or
handler processes behind, and none of them may stay a zombie, which the
embedded engine takes for a live process that still holds its locks
(docs/FIREBIRD-BUGS.md, 10)."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from collections.abc import Collection

log = logging.getLogger("subs.worker")
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def die_with(parent: int) -> None:
    """Have the kernel SIGKILL this process when ``parent`` dies (Linux's
    parent-death signal); leave at once if it is already gone."""
    if not _prctl(PR_SET_PDEATHSIG, signal.SIGKILL):
        log.debug("no parent-death signal on this system; children outlive a killed parent")
    if os.getppid() != parent:  # it died before the signal was set up
        os._exit(0)


def adopt_orphans(adopt: bool = True) -> bool:
    """Have the orphans of this process's descendants (the handler processes
    of a claimer that died, and what they started) come to this process
    instead of init, which may reap them seconds later or never; with
    ``adopt`` False, leave them to init again. False where the system
    cannot."""
    if _prctl(PR_SET_CHILD_SUBREAPER, int(adopt)):
        return True
    log.debug("cannot become a child subreaper on this system; init reaps orphaned processes")
    return False


def reap_orphans(waited_for: Collection[int]) -> list[tuple[int, int]]:
    """Reap every child that has ended, except ``waited_for`` (processes whose
    owner reaps them itself); (pid, exit code) of each, a signal's death as
    its negative number."""
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if ended is None or ended.si_pid in waited_for:
            return reaped
        pid, status = os.waitpid(ended.si_pid, 0)
        reaped.append((pid, os.waitstatus_to_exitcode(status)))
