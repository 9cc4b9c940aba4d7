"""The listener under test as a process group, the faults the soak injects into
it, and evidence capture when something hangs.

Processes are found through /proc (no psutil, never by name): the claimer is
the supervisor's child started by multiprocessing's spawn, the handler
processes are the claimer's, and a whole listener is its own process group
(started in a new session), so killing the group takes the supervisor and
every process at once, as a crash of the host process would.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fb3server
from processes import all_pids, cmdline, kill_group, stat

HERE = Path(__file__).resolve().parent
PY_SPY = Path(sys.executable).with_name("py-spy")
RESTART_EVERY = 1.0  # do not restart a listener that keeps failing (server down) more often
WORKER_EXIT = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \w+ subs\.listener: "
    r"worker pid (\d+) (?:exited with code (-?\d+)|died of \w+ \(signal (\d+)\))",
    re.MULTILINE,
)


@dataclass
class Kill:
    at: float
    pid: int
    kind: str  # "worker" or "listener"


@dataclass
class Listener:
    """`subs listen` in a session of its own, restarted by us when it dies."""

    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen | None = None
    starts: int = 0
    started_at: float = 0.0
    exits: list[int] = field(default_factory=list)

    def start(self) -> None:
        with self.log_path.open("a") as log:
            log.write(f"==== soak: starting listener at {time.time():.3f}\n")
            log.flush()
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1
        self.started_at = time.time()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ensure_running(self) -> None:
        """Restart a listener that exited (killed, or refused to start while the server was down)."""
        if self.process is not None and self.process.poll() is not None:
            self.exits.append(self.process.returncode)
            self.process = None
        if self.process is None and time.time() - self.started_at >= RESTART_EVERY:
            self.start()

    def workers(self) -> dict[int, list[int]]:
        """The claimer and handler processes, each with the processes that
        die with it: a claimer takes its handler processes along."""
        if not self.running():
            return {}
        parents = {pid: (stat(pid) or (0, 0))[0] for pid in all_pids() if "spawn_main" in cmdline(pid)}
        claimers = [pid for pid, parent in parents.items() if parent == self.process.pid]
        workers: dict[int, list[int]] = {pid: [] for pid, parent in parents.items() if parent in claimers}
        for claimer in claimers:
            workers[claimer] = [pid for pid, parent in parents.items() if parent == claimer]
        return workers

    def kill_worker(self, rng: random.Random, handler_processes: int) -> list[Kill] | None:
        """SIGKILL the process of one slot of the pool, drawn at random: the
        claimer's or one of ``handler_processes`` handler processes'. A slot
        whose process is not up yet is spared ([]); None when there is no
        claimer at all. Drawing among the processes alive made a claimer that
        had just started, alone for a moment, the victim of nearly every
        kill; its restart pause grew (the supervisor's defence against crash
        loops) until the soak ran out of time."""
        workers = self.workers()
        handlers = sorted(pid for dying in workers.values() for pid in dying)
        claimers = sorted(pid for pid in workers if pid not in handlers)
        if not claimers:
            return None
        slot = rng.randrange(handler_processes + 1)
        if slot >= len(handlers) + 1:
            return []
        pid = claimers[0] if slot == 0 else handlers[slot - 1]
        at = time.time()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return []
        return [Kill(at, dying, "worker") for dying in (pid, *workers[pid])]

    def kill_all(self) -> list[Kill]:
        """SIGKILL the whole process group and reap it; the caller restarts it."""
        if not self.running():
            return []
        at = time.time()
        pids = kill_group(self.process)
        self.exits.append(self.process.returncode)
        self.process = None
        return [Kill(at, pid, "listener") for pid in pids]

    def stop(self, grace: float) -> int | None:
        """SIGTERM and wait (the graceful stop is part of what is tested); SIGKILL after ``grace``."""
        if not self.running():
            return None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(grace)
        except subprocess.TimeoutExpired:
            kill_group(self.process)
            return None

    def worker_exits(self) -> list[tuple[float, int, int]]:
        """(time, pid, exit code) of every worker the supervisor saw end, from
        its log; a signal's death is its negative number, as multiprocessing has it."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [
            (time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000, int(pid), int(code or -int(sig)))
            for stamp, ms, pid, code, sig in WORKER_EXIT.findall(text)
        ]

    def log_count(self, text: str) -> int:
        try:
            return self.log_path.read_text(errors="replace").count(text)
        except OSError:
            return 0

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def py_spy_dump(pid: int, out: Path) -> str:
    """A py-spy dump of every thread of ``pid`` (native frames too) written to ``out``."""
    if not shutil.which(str(PY_SPY)) and not PY_SPY.exists():
        text = f"py-spy not installed (pip install py-spy into {PY_SPY.parent.parent})\n"
    else:
        try:
            result = subprocess.run(
                [str(PY_SPY), "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=60
            )
            text = result.stdout + result.stderr
        except subprocess.TimeoutExpired:
            text = "py-spy dump timed out\n"
    out.write_text(f"pid {pid} at {time.time():.3f}: {cmdline(pid)}\n{text}")
    return text


class SharedServer:
    """The Firebird 3 server of tests/fb3server.py. It is shared with every other
    test run on this machine: we restart it once per run, and notice (and
    count as faults) restarts by others; one left down is started again."""

    DOWN_FOR = 10.0

    def __init__(self, log_fault: Callable[..., None], notes: list[str]) -> None:
        self.log_fault = log_fault
        self.notes = notes
        self.restarts: list[tuple[float, float]] = []
        self.external: list[tuple[float, float]] = []
        self.pid: int | None = None
        self.seen_at = self.changed_at = time.time()

    def start(self) -> None:
        fb3server.start()
        self.watch(ours=True)

    def restart(self) -> None:
        begin = time.time()
        fb3server.stop()
        self.start()
        self.restarts.append((begin, time.time()))
        self.log_fault({"kind": "server restart", "at": begin, "until": time.time()})

    def watch(self, ours: bool = False) -> None:
        pids = fb3server._pids("firebird")
        current = pids[0] if pids else None
        now = time.time()
        if current != self.pid:
            if not ours and self.pid is not None:
                self.external.append((self.seen_at, now))
                self.log_fault({"kind": "server restart by others", "at": self.seen_at, "until": now})
            self.changed_at = now
        self.pid, self.seen_at = current, now
        if current is None and not ours and now - self.changed_at > self.DOWN_FOR:
            self.notes.append(f"the server was down for {self.DOWN_FOR:.0f}s (not our doing): started it again")
            self.start()
