"""The tests' own process handling: a killed listener's group leaves no zombie
behind, which the embedded engine would take for a live lock owner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import wait_until
from processes import group, kill_group, stat, subreaper

# A leader, its child and that child's child, all waiting; as a listener is
# its supervisor, claimer and handler processes.
FAMILY = """
import subprocess, sys, time
depth = int(sys.argv[1])
if depth:
    subprocess.Popen([sys.executable, __file__, str(depth - 1)])
time.sleep(600)
"""


def family(tmp_path: Path) -> subprocess.Popen[bytes]:
    script = tmp_path / "family.py"
    script.write_text(FAMILY)
    leader = subprocess.Popen([sys.executable, str(script), "2"], start_new_session=True)
    wait_until(lambda: len(group(leader.pid)) == 3, 10, "the leader's child and grandchild")
    return leader


def test_the_orphans_of_a_killed_process_come_to_the_subreaper(tmp_path: Path) -> None:
    leader = family(tmp_path)
    child = next(pid for pid in group(leader.pid) if pid != leader.pid and stat(pid) == (leader.pid, leader.pid))
    with subreaper():
        leader.kill()
        leader.wait(10)
        wait_until(lambda: stat(child) == (os.getpid(), leader.pid), 10, "the orphan to become ours")
        kill_group(leader, 10)
    assert stat(child) is None


def test_kill_group_reaps_the_whole_group(tmp_path: Path) -> None:
    leader = family(tmp_path)
    killed = kill_group(leader, 10)
    assert len(killed) == 3
    assert [pid for pid in killed if Path(f"/proc/{pid}").exists()] == []
    assert leader.returncode == -9
