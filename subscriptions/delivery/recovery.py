"""Failing at once what a dead claimer process held.

The supervisor sees its claimer die (SIGKILL, the OOM killer, a crash) the
moment it happens; its claims would otherwise wait for their lease to run out
(30 s by default). The lease stays for what the supervisor cannot see: the
death of the whole listener or of its host.
"""

from __future__ import annotations

import logging
import signal

from firebird.driver import DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database, nowait_tpb
from subscriptions.db.errors import is_conflict

from .claims import MAX_ERROR_LENGTH

log = logging.getLogger("subs.listener")


def exit_reason(exitcode: int | None, process: str = "handler process") -> str:
    """``process`` and how it ended, as an attempt's error and in the log."""
    return f"{process} {how_it_ended(exitcode)}"


def how_it_ended(exitcode: int | None) -> str:
    """``exited with code 1``, or ``died of SIGABRT (signal 6)``: the name
    tells an operator at once a kill (SIGKILL: the OOM killer, a person)
    from a crash (SIGABRT, SIGSEGV: its Python stacks are in the log,
    see logs.configure, and there may be a core dump)."""
    if exitcode is None or exitcode >= 0:
        return f"exited with code {exitcode}"
    name = _signal_name(-exitcode)
    return f"died of {name} (signal {-exitcode})" if name else f"died of signal {-exitcode}"


def exit_label(exitcode: int | None) -> str:
    """How a process ended, in short (a metric's label): ``SIGKILL``, ``code 1``."""
    if exitcode is None or exitcode >= 0:
        return f"code {exitcode}"
    return _signal_name(-exitcode) or f"signal {-exitcode}"


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def fail_abandoned(db: Database, owner: str, reason: str) -> bool:
    """Record ``reason`` on everything ``owner`` held and end its leases, so
    the next claim hands those events out again with the attempt counted;
    False when a transaction of the dead worker still holds some of it (its
    attachment is not gone yet): try again a moment later."""
    params = (owner, reason[:MAX_ERROR_LENGTH])
    try:
        with db.transaction(nowait_tpb()) as cursor:
            cursor.execute(sql.load("claims")["fail_abandoned"], params)
            ((events,),) = cursor.fetchall()
    except DatabaseError as exc:
        if is_conflict(exc):
            return False
        raise
    if events:
        log.warning("%s event(s) held by %s failed at once: %s", events, owner, reason)
    return True
