"""Ctrl-Z on `subs listen` run in a terminal (docs/OPERATIONS.md, "The
embedded engine"): a stopped process of an embedded database holds up every
other process of it, the application's included."""

from __future__ import annotations

import os
import signal
import time

from subscriptions.db.terminal_stop import REFUSED

from conftest import wait_until
from listening import Listener, handled, insert
from processes import group, state


def test_ctrl_z_stops_a_listener_only_where_that_holds_up_nobody(items, tmp_path, listeners):
    """On an embedded database the listener's processes ignore Ctrl-Z and the
    listener says why; the application's writes and their delivery go on. On
    a server Ctrl-Z stops them as usual, and once continued they go on."""
    listener = Listener(items, tmp_path, "--mode", "parallel", "--workers", "2", job=True)
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    members = group(listener.process.pid)
    assert len(members) >= 5, "the listener, the resource tracker, the claimer and 2 handler processes"

    os.killpg(listener.process.pid, signal.SIGTSTP)
    if items.is_remote:
        wait_until(lambda: {state(pid) for pid in members} == {"T"}, 10, "every process of the listener to stop")
        assert REFUSED not in listener.output()
        os.killpg(listener.process.pid, signal.SIGCONT)
    else:
        wait_until(lambda: REFUSED in listener.output(), 10, "the listener to say it ignores Ctrl-Z")
        settled = time.monotonic() + 1.0  # a stop takes effect as the signal arrives: well within this
        while time.monotonic() < settled:
            assert [pid for pid in members if state(pid) == "T"] == []
            time.sleep(0.05)
        assert listener.output().count(REFUSED) == 1, listener.output()
    insert(items, 2, 1)
    listener.wait_for(lambda lines: handled(lines) == [1, 2])
