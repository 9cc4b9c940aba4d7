"""`subs listen` while the database is shut down for maintenance: a listener
rides through and says so without burying its log."""

from __future__ import annotations

import re
import time

from listening import Listener, handled, insert, shut_down


def test_a_listener_rides_through_a_database_shutdown_without_flooding_its_log(items, tmp_path, listeners):
    """While the database is shut down, the listener's housekeeping tries
    again after pauses that grow (it warned every second, the length of the
    outage, while a dead claimer's events waited to be failed); once the
    database is online, events are delivered again."""
    listener = Listener(items, tmp_path, "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    with shut_down(items):
        time.sleep(12)
        during = listener.output()
    insert(items, 2, 1)
    listener.wait_for(lambda lines: handled(lines) == [1, 2], timeout=60)
    assert "database connection lost" in during, during
    warned = re.findall(r"WARNING subs.listener: housekeeping: .*", during)
    pauses = [int(pause) for pause in re.findall(r"housekeeping: .*; trying again in (\d+)s", during)]
    assert 1 <= len(warned) <= 5 and len(pauses) == len(warned) and max(pauses) >= 4, during
