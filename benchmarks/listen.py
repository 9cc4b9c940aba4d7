"""Runs ``subs listen`` as a subprocess with the benchmark plugin, the way a
user would, and reads back what the plugin recorded."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from subscriptions.db.settings import ConnectionSettings

from . import PACKAGE_DIR, PYTHON
from .app import pending
from .config import Context
from .engines import Engine
from .results import Recorder

PLUGIN = PACKAGE_DIR / "recorder.py"
SAFETY_LIMIT = 600.0  # seconds: a run that takes longer is stopped and reported as capped
_CONFLICT = re.compile(r"conflict|deadlock|lock time-?out", re.IGNORECASE)
_PROBLEM = re.compile(r" (WARNING|ERROR|CRITICAL) |Traceback")


@dataclass(frozen=True)
class Handled:
    """One handler call, as the plugin recorded it (monotonic ns), and the
    worker process that made it."""

    event_id: int
    key: int
    attempt: int
    started: int
    finished: int
    pid: int


@dataclass(frozen=True)
class Outcome:
    handled: list[Handled]
    wall: float  # seconds from starting the process to its exit
    capped: bool  # stopped at the time limit instead of draining
    log: str

    @property
    def span(self) -> float:
        """Seconds from the first handler start to the last handler finish."""
        if not self.handled:
            return 0.0
        return (max(h.finished for h in self.handled) - min(h.started for h in self.handled)) / 1e9

    @property
    def stagger(self) -> float:
        """Seconds between the first handler start of the first and of the last worker process."""
        firsts: dict[int, int] = {}
        for h in self.handled:
            firsts[h.pid] = min(firsts.get(h.pid, h.started), h.started)
        return (max(firsts.values()) - min(firsts.values())) / 1e9 if firsts else 0.0

    @property
    def duplicates(self) -> int:
        return len(self.handled) - len({h.event_id for h in self.handled})

    @property
    def conflicts(self) -> int:
        """Lock or update conflicts the listener let the user see (in its warnings and errors)."""
        return sum(1 for line in self.problems if _CONFLICT.search(line))

    @property
    def problems(self) -> list[str]:
        return problems(self.log)


def problems(log: str) -> list[str]:
    """The listener's warnings, errors and tracebacks."""
    return [line for line in log.splitlines() if _PROBLEM.search(line)]


class Listener:
    """One ``python -m subscriptions listen --plugin recorder.py ...`` process."""

    def __init__(
        self, engine: Engine, settings: ConnectionSettings, workdir: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        run = workdir / f"listen-{uuid.uuid4().hex[:8]}"
        self.records = run / "records"
        self.records.mkdir(parents=True)
        self.log_path = run / "listener.log"
        env = engine.env(settings) | {"BENCH_RECORD_DIR": str(self.records)} | (env or {})
        self.args = args
        command = [PYTHON, "-m", "subscriptions", "-d", settings.dsn, "listen", "--plugin", str(PLUGIN), *args]
        with open(self.log_path, "w") as log:
            self.started = time.monotonic()
            # cwd: the run's own directory, so no subs.toml of the user applies;
            # a session of its own, so a failed run can end the workers with it.
            self.process = subprocess.Popen(
                command, env=env, cwd=run, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Leave nothing running: the listener and its worker processes."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    @property
    def pid(self) -> int:
        return self.process.pid

    def handled(self) -> list[Handled]:
        return [
            Handled(*map(int, line.split()), int(path.stem))
            for path in self.records.glob("*.rec")
            for line in path.read_text().splitlines()
            if line
        ]

    def count(self) -> int:
        return sum(path.read_bytes().count(b"\n") for path in self.records.glob("*.rec"))

    def finish(self, limit: float | None = SAFETY_LIMIT) -> Outcome:
        """Wait for a --drain listener to exit; at ``limit`` seconds stop it
        gracefully (SIGTERM: running handlers finish, the rest is given back)."""
        capped = False
        try:
            self.process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            capped = True
            self.stop()
        return self._outcome(capped)

    def stop(self, grace: float = 60.0) -> Outcome:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self._outcome(True)

    def check_drained(self, settings: ConnectionSettings, recorder: Recorder, workload: str, engine: str) -> int:
        """After a --drain run that was not stopped: how many events it left
        behind, noted with the listener's warnings when not zero."""
        left = pending(settings)
        if left:
            logged = "; ".join(dict.fromkeys(line.split(" ", 2)[-1] for line in problems(self.log())))
            recorder.note(
                workload,
                engine,
                f"subs listen {' '.join(self.args)} exited with {left:,} event(s) "
                f"still in the log; it logged: {logged or 'nothing'}",
            )
        return left

    def _outcome(self, capped: bool) -> Outcome:
        wall = time.monotonic() - self.started
        # A drain that was stopped says so and exits 1.
        stopped = (-signal.SIGTERM, 1) if "--drain" in self.args else (-signal.SIGTERM,)
        if self.process.returncode not in (0, *(stopped if capped else ())) or "Traceback" in self.log():
            raise RuntimeError(f"subs listen exited with {self.process.returncode}:\n{self.log()[-3000:]}")
        return Outcome(self.handled(), wall, capped, self.log())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def drain_rate(ctx: Context, engine: Engine, settings: ConnectionSettings, workload: str, *args: str) -> float:
    """Events/s of ``subs listen --drain ARGS`` through what the log holds:
    events handled over the span from the first handler's start to the last
    one's end. What it left behind is noted for ``workload``."""
    with Listener(engine, settings, ctx.workdir, "--drain", *args) as listener:
        outcome = listener.finish()
        listener.check_drained(settings, ctx.recorder, workload, engine.name)
    return len(outcome.handled) / outcome.span
