"""Processes that die with their parent: a SIGKILLed listener must not
leave its claimer or handler processes behind."""

from __future__ import annotations

import ctypes
import logging
import os
import signal

log = logging.getLogger("subs.worker")
PR_SET_PDEATHSIG = 1


def die_with(parent: int) -> None:
    """Have the kernel SIGKILL this process when ``parent`` dies (Linux's
    parent-death signal); leave at once if it is already gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        log.debug("no parent-death signal on this system; children outlive a killed parent")
    if os.getppid() != parent:  # it died before the signal was set up
        os._exit(0)
