"""Processes that die with their parent, and a parent that reaps what its
dead children leave: a SIGKILLed listener must not leave its claimer or
handler processes behind, and none of them may stay a zombie, which the
embedded engine takes for a live process that still holds its locks
(docs/FIREBIRD-BUGS.md, 10). And a claimer that stops gracefully however
its stop signals come."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import signal
import threading
from collections.abc import Callable, Collection, Iterator

log = logging.getLogger("subs.worker")
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_halter: threading.Thread | None = None
_stop_signalled = False  # see stop_signalled()
_HELD = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@functools.cache
def stop_signals() -> frozenset[int]:
    """What stops a subs process gracefully: SIGTERM, SIGINT, and SIGHUP (its
    terminal was closed: running handlers finish, rather than die and wait
    out their lease) unless the process started with SIGHUP ignored (nohup:
    it was asked to outlive its terminal). Read once, before any of them is
    taken over."""
    hangup = signal.getsignal(signal.SIGHUP) != signal.SIG_IGN
    return frozenset({signal.SIGTERM, signal.SIGINT, *([signal.SIGHUP] if hangup else [])})


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


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back in this thread meanwhile, so that
    the processes started inside begin with them held (exec keeps a thread's
    signal mask) until they can act on them (``take_held_stop_signals``). A
    Ctrl-C within a second of the start met the claimer and its handler
    processes importing their modules, and each printed a KeyboardInterrupt
    traceback (22 stops of 30 by hand); a SIGTERM killed a claimer that was
    still importing; a terminal's hangup killed multiprocessing's resource
    tracker, which ignores only SIGINT and SIGTERM (it now keeps SIGHUP held
    for good). This process loses none: another of its threads takes them,
    or this one once they are let through. (Ignoring SIGHUP here instead,
    for the children to inherit, lost a hangup that came meanwhile.)"""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def leave_hangup_to_the_parent() -> None:
    """Ignore SIGHUP from now on, and drop one held since the start
    (``stop_signals_held``): when the terminal closes, the supervisor alone
    takes it and stops its children. Before ``stop_signals`` is first read."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def take_held_stop_signals() -> None:
    """Let through the stop signals held since this process started
    (``stop_signals_held``), once it has set what they do."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)


def halt_on_stop_signals(halt: Callable[[], None]) -> None:
    """Have the first stop signal (``stop_signals``) call ``halt``, in a thread of its own;
    again after something else took the signals over (the embedded engine
    does, when it attaches). Main thread only.

    The handlers themselves do nothing but have Python write the signal's
    number to a pipe, which the thread reads. A halt inside the handler ran
    in the main thread between two of its steps, and could wait for ever for
    a lock the main thread held: Ctrl-C sends the claimer SIGINT and the
    supervisor then SIGTERM, and in 3 tries of 10 the second came while the
    handler of the first was in Event.set; the listener waited out its
    --grace and killed the claimer. A burst of signals nested the handlers
    until RecursionError."""
    global _halter
    if _halter is None:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        _halter = threading.Thread(target=_halt_at_stop_signal, args=(read_end, halt), name="signals", daemon=True)
        _halter.start()
    for signum in stop_signals():
        signal.signal(signum, _note_stop)


def _note_stop(signum: int, frame: object) -> None:
    global _stop_signalled
    _stop_signalled = True


def stop_signalled() -> bool:
    """Whether a stop signal reached this process (noted in the main thread
    as it arrives, before ``halt`` runs in the signals thread). The client
    library shuts its engine down on SIGINT and SIGTERM before it passes them
    on, while it holds them (from the first attach until ``halt_on_stop_signals``
    takes them back): a database error at that moment is the stop's doing."""
    return _stop_signalled


def _halt_at_stop_signal(numbers: int, halt: Callable[[], None]) -> None:
    while received := os.read(numbers, 64):
        if stop_signals() & set(received):
            halt()
            return
