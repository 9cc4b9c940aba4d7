"""Soak test with faults: producers change subscribed tables while `subs listen`
consumes, and workers, the whole listener and (on Firebird 3) the server are
killed or restarted under it. At the end it checks that every committed change
produced exactly its subscribed events, each handled at least once, more than
once only when a fault cut an attempt off, nothing left behind, nothing from a
rolled-back transaction, and (ordered mode) each subscription in order.

    .venv/bin/python tests/soak.py --engine fb3 --mode parallel --changes 100000 --seconds 1200 --batch 5

Prints one summary line; exit status 0 when every check passed, 1 otherwise
(the failed checks follow the summary). It starts Firebird 3 itself
(tests/fb3server.py, needs root) and uses a database directory of its own.
The work directory (records, logs, evidence) is kept when a check fails.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from firebird.driver import DatabaseError  # noqa: E402

from subscriptions.db.connection import Database  # noqa: E402
from subscriptions.db.settings import ConnectionSettings  # noqa: E402
from subscriptions.errors import SubsError  # noqa: E402

import fb3server  # noqa: E402
from processes import alive  # noqa: E402
from soak_chaos import Kill, Listener, SharedServer, py_spy_dump  # noqa: E402
from soak_checks import SUBSCRIPTIONS, Change, Fault, Report, run_checks  # noqa: E402

PRODUCERS = 4
STUCK_AFTER = 20.0  # a claim held this long by a live worker (handlers take < 0.1 s) is stuck
STALL_AFTER = 30.0  # a live worker with no delivery this long while events are claimable is stalled
QUIET_AFTER = 6.0  # ... this long: worth a py-spy dump (a note), before its leases run out twice over
MONITOR_EVERY = 2.0
TABLES = """
RECREATE TABLE SOAK_A (ID INTEGER NOT NULL PRIMARY KEY, CHANGE_NO BIGINT NOT NULL, NOTE VARCHAR(40));
RECREATE TABLE SOAK_B (ID INTEGER NOT NULL PRIMARY KEY, CHANGE_NO BIGINT NOT NULL, NOTE VARCHAR(40));
RECREATE TABLE SOAK_CHANGES (CHANGE_NO BIGINT NOT NULL PRIMARY KEY, TBL VARCHAR(10) NOT NULL,
    ACT CHAR(1) NOT NULL, ROW_ID INTEGER NOT NULL, PREV_NO BIGINT, PRODUCER SMALLINT NOT NULL,
    TXN INTEGER NOT NULL)
"""
SPAN_OF_L = (
    "SELECT FIRST 1 TRIM(sp.HOLDER) FROM EVENT_SPAN sp WHERE sp.SUB_ID = l.SUB_ID "
    "AND l.EVENT_ID BETWEEN sp.FIRST_EVENT AND sp.LAST_EVENT AND sp.EXPIRES_AT > EVENT_NOW()"
)
CLAIMABLE = (
    "SELECT COUNT(*) FROM EVENT_LOG l WHERE l.DEAD_AT IS NULL "
    f"AND NOT EXISTS ({SPAN_OF_L}) "
    "AND (l.NEXT_ATTEMPT_AT IS NULL OR l.NEXT_ATTEMPT_AT <= EVENT_NOW())"
)
# Claims held, by their first event: parallel spans and ordered batches.
HELD = (
    "SELECT FIRST_EVENT, TRIM(HOLDER) FROM EVENT_SPAN WHERE EXPIRES_AT > EVENT_NOW() "
    "UNION ALL SELECT FIRST_EVENT, TRIM(HOLDER) FROM EVENT_LEASE "
    "WHERE HOLDER IS NOT NULL AND FIRST_EVENT IS NOT NULL AND EXPIRES_AT > EVENT_NOW()"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("fb3", "fb5"), default="fb3")
    parser.add_argument("--mode", choices=("parallel", "ordered"), default="parallel")
    parser.add_argument("--changes", type=int, default=3000, help="committed changes in all (default 3000)")
    parser.add_argument("--seconds", type=float, default=120, help="time limit for the whole run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, help="listener workers (default 4 parallel, 2 ordered)")
    parser.add_argument("--batch", type=int, default=1, help="--batch of the listener (parallel mode)")
    parser.add_argument(
        "--key-order",
        action="store_true",
        help="parallel mode with --key-order, checking each row's events are in order",
    )
    parser.add_argument(
        "--rate", type=float, help="changes per second in all (default: spread over ~70%% of the production time)"
    )
    parser.add_argument(
        "--kill-every",
        type=float,
        nargs=2,
        default=(2.0, 5.0),
        metavar=("MIN", "MAX"),
        help="seconds between kills, drawn uniformly (default 2 5)",
    )
    parser.add_argument(
        "--listener-share", type=float, default=0.25, help="share of kills that take the whole listener (default 0.25)"
    )
    parser.add_argument("--workdir", type=Path, help="records, logs and evidence (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory and database")
    args = parser.parse_args(argv)
    args.workers = args.workers or (4 if args.mode == "parallel" else 2)
    if args.mode == "ordered":
        args.batch = 1  # the order check bounds claim times by the previous attempt's start
        if args.key_order:
            parser.error("--key-order goes with --mode parallel")
    return args


def max_commit_gap(txns: list[dict]) -> float:
    """The longest time any producer went without a commit: how long a fault
    stalled the application side (on the embedded engine a killed process
    holding locks stalls everyone until the lock manager notices)."""
    gap = 0.0
    for producer in {t["p"] for t in txns}:
        times = sorted(t["t"] for t in txns if t["p"] == producer and t["o"] == "c" and t["t"])
        gap = max([gap, *(b - a for a, b in zip(times, times[1:]))])
    return gap


class Progress:
    """Follows appended JSON-lines files (producer logs, delivery records) incrementally."""

    def __init__(self, paths: list[Path]) -> None:
        self.offsets = {path: 0 for path in paths}

    def new_lines(self) -> list[dict]:
        lines = []
        for path, offset in self.offsets.items():
            try:
                with path.open("rb") as file:
                    file.seek(offset)
                    data = file.read()
            except FileNotFoundError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            self.offsets[path] = offset + len(complete)
            lines += [json.loads(line) for line in complete.splitlines()]
        return lines


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.started = time.time()
        self.deadline = self.started + args.seconds
        self.drain_reserve = min(180.0, max(25.0, 0.25 * args.seconds))
        self.workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"subs-soak-{args.engine}-{args.mode}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.record = self.workdir / "deliveries.jsonl"
        self.producer_logs = [self.workdir / f"producer-{p}.jsonl" for p in range(1, PRODUCERS + 1)]
        self.kills: list[Kill] = []
        self.kill_count = 0
        self.problems: list[str] = []  # failures seen while running (stuck claims, stalls, ...)
        self.notes: list[str] = []  # worth knowing, not a failure of subs
        self.held: dict[tuple[int, str], float] = {}
        self.reported: set[int] = set()
        self.dumped: set[int] = set()
        self.last_delivery: dict[int, float] = {}
        self.first_seen: dict[int, float] = {}
        self.handlers_of: dict[int, set[int]] = {}  # claimer pid: the handler processes seen under it
        self.backlog_empty_at = self.started
        self.committed = 0
        self.server = SharedServer(self.log_fault, self.notes) if args.engine == "fb3" else None
        self.db: Database | None = None
        self.db_dir: Path | None = None
        self.producers: list[subprocess.Popen] = []

    # -- set-up ---------------------------------------------------------------------------

    def setup(self) -> None:
        if self.server is not None:
            self.server.start()
            self.db_dir = fb3server.database_dir()
            self.settings = ConnectionSettings(
                f"inet://127.0.0.1:3050/{self.db_dir}/soak.fdb", "SYSDBA", fb3server.password()
            )
        else:
            self.settings = ConnectionSettings(str(self.workdir / "soak.fdb"))
        self.env = {
            **os.environ,
            "ISC_USER": self.settings.effective_user,
            "ISC_PASSWORD": self.settings.password or "",
            "SOAK_RECORD": str(self.record),
        }
        self.retrying(lambda: self.subs("init", "--create"))
        for statement in filter(str.strip, TABLES.split(";")):
            self.retrying(lambda: self.execute(statement))
        for table, actions, tag, when, _ in SUBSCRIPTIONS:
            self.retrying(lambda: self.subs("add", table, actions, tag, *(["--when", when] if when else [])))
        command = [
            sys.executable,
            "-m",
            "subscriptions",
            "-d",
            self.settings.dsn,
            "listen",
            "--plugin",
            str(HERE / "soak_plugin.py"),
            "--mode",
            self.args.mode,
            "--workers",
            str(self.args.workers),
            "--batch",
            str(self.args.batch),
            "--lease",
            "3",
            "--poll",
            "1",
            "--backoff-min",
            "0.1",
            "--backoff-max",
            "0.5",
            "--max-attempts",
            "1000",
            "--grace",
            "10",
            *(["--key-order"] if self.args.key_order else []),
        ]
        self.listener = Listener(command, self.env, self.workdir / "listener.log")

    def retrying(self, step: Callable[[], None], attempts: int = 20) -> None:
        """Set-up steps are idempotent; the shared server may be restarted under them."""
        for attempt in range(attempts):
            try:
                return step()
            except (DatabaseError, SubsError, RuntimeError):
                if attempt == attempts - 1:
                    raise
                time.sleep(2)
                self.watch_server()

    def watch_server(self) -> None:
        if self.server is not None:
            self.server.watch()

    def execute(self, statement: str) -> None:
        with Database(self.settings) as db, db.transaction() as cursor:
            cursor.execute(statement)

    def subs(self, *args: str) -> None:
        command = [sys.executable, "-m", "subscriptions", "-d", self.settings.dsn, *args]
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"subs {' '.join(args)} failed: {result.stdout}{result.stderr}")

    def start_producers(self) -> float:
        production_end = self.deadline - self.drain_reserve
        rate = self.args.rate
        if rate is None:
            rate = self.args.changes / max((production_end - time.time()) * 0.7, 1.0)
        for p, log in enumerate(self.producer_logs, start=1):
            quota = self.args.changes // PRODUCERS + (p <= self.args.changes % PRODUCERS)
            out = (self.workdir / f"producer-{p}.out").open("w")
            self.producers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(HERE / "soak_producer.py"),
                        self.settings.dsn,
                        str(p),
                        str(quota),
                        str(production_end),
                        str(rate / PRODUCERS),
                        str(log),
                        str(self.args.seed),
                    ],
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        return rate

    # -- faults ---------------------------------------------------------------------------

    def kill(self) -> bool:
        """SIGKILL a random worker, or the whole listener (always the second
        time, so that even a short run has one; then by --listener-share).
        False when there was nothing to kill yet (a listener still starting);
        a worker slot drawn while its process is not up yet is spared."""
        whole = self.kill_count == 1 or self.rng.random() < self.args.listener_share
        killed = self.listener.kill_all() if whole else self.listener.kill_worker(self.rng, self.args.workers)
        if killed is None or (whole and not killed):
            return False
        if whole:
            self.listener.start()
        self.kills += killed
        self.log_fault(*({"kind": k.kind, "at": k.at, "pid": k.pid} for k in killed))
        self.kill_count += bool(killed)
        return True

    def log_fault(self, *faults: dict) -> None:
        """faults.jsonl in the work directory, for looking into a failed run later."""
        with (self.workdir / "faults.jsonl").open("a") as file:
            file.writelines(json.dumps(fault) + "\n" for fault in faults)

    # -- watching -------------------------------------------------------------------------

    def query(self, sql: str) -> list[tuple] | None:
        """A monitoring query on a connection of our own; None while the server is away."""
        try:
            if self.db is None:
                self.db = Database(self.settings)
            with self.db.transaction() as cursor:
                cursor.execute(sql)
                return cursor.fetchall()
        except (DatabaseError, SubsError):
            if self.db is not None:
                try:
                    self.db.close()
                except DatabaseError:
                    pass
            self.db = None
            return None

    def remember_handlers(self) -> None:
        """Which handler processes each claimer ran: they die with it, and
        its exit explains their cut-off deliveries."""
        for pid, handlers in self.listener.workers().items():
            if handlers:
                self.handlers_of.setdefault(pid, set()).update(handlers)

    def monitor(self, deliveries: Progress) -> None:
        """Catch claims held far longer than any handler runs, and workers that
        stopped delivering while events wait: the known FB3 stall. Evidence
        (py-spy dumps) is taken while it is happening; nothing is hidden."""
        now = time.time()
        for line in deliveries.new_lines():
            if line["ph"] == "s":
                self.last_delivery[line["p"]] = line["t"]
        held = self.query(HELD)
        if held is not None:
            current = {(event, owner) for event, owner in held}
            self.held = {key: self.held.get(key, now) for key in current}
            for (event, owner), since in self.held.items():
                pid = int(owner.rsplit(":", 1)[1])
                if now - since > STUCK_AFTER and alive(pid) and pid not in self.reported:
                    self.report_stuck(pid, f"worker {pid} has held event {event} for {now - since:.0f}s")
        claimable = self.query(CLAIMABLE)
        if claimable is not None and claimable[0][0] == 0:
            self.backlog_empty_at = now
        for pid, handlers in self.listener.workers().items():
            if not handlers:
                continue  # a handler process; its claimer is the one that stalls
            self.first_seen.setdefault(pid, now)
            delivered = max((self.last_delivery.get(handler, 0.0) for handler in handlers), default=0.0)
            quiet = now - max(self.first_seen[pid], delivered, self.backlog_empty_at)
            if quiet > STALL_AFTER and pid not in self.reported:
                self.report_stuck(
                    pid,
                    f"claimer {pid} had nothing delivered for {quiet:.0f}s while events were "
                    f"claimable ({claimable[0][0] if claimable else '?'} now)",
                )
            elif quiet > QUIET_AFTER and pid not in self.dumped:
                self.dumped.add(pid)
                out = self.workdir / f"quiet-{pid}.txt"
                py_spy_dump(pid, out)
                self.notes.append(
                    f"worker {pid} delivered nothing for {quiet:.0f}s while events were claimable; py-spy dump: {out}"
                )

    def report_stuck(self, pid: int, what: str) -> None:
        self.reported.add(pid)
        out = self.workdir / f"evidence-{pid}.txt"
        py_spy_dump(pid, out)
        self.problems.append(f"{what}; py-spy dump: {out}")

    def leftovers(self) -> list[tuple] | None:
        return self.query(f"SELECT l.EVENT_ID, ({SPAN_OF_L}), l.DEAD_AT FROM EVENT_LOG l ORDER BY l.EVENT_ID")

    # -- the run --------------------------------------------------------------------------

    def run(self) -> Report:
        self.setup()
        stop_on_signals()
        self.listener.start()
        self.rate = self.start_producers()
        logs, deliveries = Progress(self.producer_logs), Progress([self.record])
        restart_at = self.rng.uniform(0.3, 0.6) * self.args.changes if self.server else None
        next_kill = time.time() + self.rng.uniform(*self.args.kill_every)
        next_monitor = 0.0
        while any(p.poll() is None for p in self.producers):
            self.watch_server()
            self.listener.ensure_running()
            self.committed += sum(len(t["ch"]) for t in logs.new_lines() if t["o"] == "c")
            if restart_at is not None and not self.server.restarts and self.committed >= restart_at:
                self.server.restart()
            if time.time() >= next_kill:
                pause = self.rng.uniform(*self.args.kill_every) if self.kill() else 0.5
                next_kill = time.time() + pause
            if time.time() >= next_monitor:
                self.monitor(deliveries)
                next_monitor = time.time() + MONITOR_EVERY
            self.remember_handlers()
            time.sleep(0.2)
        if restart_at is not None and not self.server.restarts:
            self.server.restart()  # production was quicker than planned: restart while draining
        self.drain(deliveries)
        code = self.listener.stop(grace=20)
        if code != 0:
            self.problems.append(f"listener did not stop cleanly on SIGTERM (exit {code}): {self.listener.log_tail(5)}")
        return self.check()

    def drain(self, deliveries: Progress) -> None:
        """Let the listener finish the backlog, without faults, until the time limit."""
        drain_end = self.deadline - 10
        while time.time() < drain_end:
            self.watch_server()
            self.listener.ensure_running()
            self.monitor(deliveries)
            self.remember_handlers()
            left = self.query("SELECT COUNT(*) FROM EVENT_LOG")
            if left is not None and left[0][0] == 0:
                time.sleep(1.0)  # let acknowledgements in flight settle
                return
            time.sleep(0.5)
        left = self.query("SELECT COUNT(*) FROM EVENT_LOG")
        self.problems.append(f"time limit: {left[0][0] if left else '?'} event(s) still in EVENT_LOG")
        for pid in self.listener.workers():
            if pid not in self.reported:
                self.report_stuck(pid, f"worker {pid} alive at the time limit")

    def check(self) -> Report:
        for _ in range(30):
            journal_rows = self.query(
                "SELECT CHANGE_NO, TRIM(TBL), ACT, ROW_ID, PREV_NO, PRODUCER, TXN FROM SOAK_CHANGES"
            )
            leftovers = self.leftovers()
            if journal_rows is not None and leftovers is not None:
                break
            self.watch_server()
            time.sleep(2)
        else:
            raise RuntimeError("cannot read the database for the end checks")
        journal = [Change(*row) for row in journal_rows]
        txns = [json.loads(line) for log in self.producer_logs if log.exists() for line in log.read_text().splitlines()]
        lines = (json.loads(line) for line in self.record.read_text().splitlines()) if self.record.exists() else []
        faults = [Fault(k.at, k.at, k.pid, "kill") for k in self.kills]
        if self.server is not None:
            faults += [Fault(begin, end, None, "restart") for begin, end in self.server.restarts]
            faults += [Fault(begin, end, None, "external-restart") for begin, end in self.server.external]
        for at, pid, code in self.listener.worker_exits():
            # A claimer's handler processes die with it.
            faults += [Fault(at, at, dying, f"worker-exit-{code}") for dying in (pid, *self.handlers_of.get(pid, ()))]
        report = run_checks(
            journal, txns, lines, faults, leftovers, ordered=self.args.mode == "ordered", key_order=self.args.key_order
        )
        report.figures["producer_max_gap"] = max_commit_gap(txns)
        for p, producer in enumerate(self.producers, start=1):
            if producer.returncode != 0:
                tail = (self.workdir / f"producer-{p}.out").read_text()[-500:]
                self.problems.append(f"producer {p} exited with {producer.returncode}: {tail}")
        report.failures = self.problems + report.failures
        return report

    def summary(self, report: Report) -> str:
        """The one line: what was produced, delivered and injected, and the verdict."""
        f = report.figures
        worker_kills = sum(1 for k in self.kills if k.kind == "worker")
        listener_kills = len({k.at for k in self.kills if k.kind == "listener"})
        causes = ", ".join(f"{cause} {count}" for cause, count in sorted(report.causes.items())) or "none"
        restarts = "n/a (embedded)"
        if self.server is not None:
            restarts = str(len(self.server.restarts))
            restarts += f" (+{len(self.server.external)} by others)" if self.server.external else ""
        args = self.args
        mode = args.mode + (" key-order" if args.key_order else "")
        parts = [
            f"SOAK {args.engine} {mode} workers={args.workers} batch={args.batch} seed={args.seed}:",
            f"changes={f.get('changes')}/{self.args.changes}",
            f"rolled-back={f.get('rolled_back')}",
            f"unknown-commits={f.get('unknown_commits')}",
            f"events={f.get('events')}",
            f"handled={f.get('handled')}",
            f"deliveries={f.get('deliveries')}",
            f"duplicates={f.get('duplicates')} ({causes})",
            f"cut-off={f.get('cut_off')}",
            f"retried-failures={f.get('retried_failures')}",
            f"kills={worker_kills + listener_kills} (worker {worker_kills}, listener {listener_kills})",
            f"listener-starts={self.listener.starts}",
            f"server-restarts={restarts}",
            *([f"reordered-by-commit={f.get('reordered_by_commit')}"] if self.args.mode == "ordered" else []),
            f"stuck-workers-replaced={self.listener.log_count('made no progress')}",
            f"pending={f.get('pending')} claimed={f.get('claimed')} dead={f.get('dead')}",
            f"producer-max-gap={f.get('producer_max_gap', 0):.1f}s",
            f"elapsed={time.time() - self.started:.0f}s",
            f"-> {'PASS' if not report.failures else 'FAIL'}",
        ]
        return " ".join(parts)

    def cleanup(self, passed: bool) -> None:
        for producer in self.producers:
            if producer.poll() is None:
                producer.kill()
                producer.wait()
        if getattr(self, "listener", None) is not None and self.listener.running():
            self.listener.stop(grace=5)
        if self.db is not None:
            try:
                self.db.close()
            except DatabaseError:
                pass
            self.db = None
        if passed and not self.args.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
            if self.db_dir is not None:
                shutil.rmtree(self.db_dir, ignore_errors=True)


def stop_on_signals() -> None:
    """SIGTERM or SIGINT (also when started in the background, where SIGINT is
    ignored) end the run through the clean-up. Installed again after the first
    attach: the Firebird client library sets handlers of its own."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: sys.exit(130))


def main(argv: list[str] | None = None) -> int:
    faulthandler.enable()  # a crash inside the engine shows where Python called it
    stop_on_signals()
    soak = Soak(parse_args(argv))
    passed = False
    try:
        report = soak.run()
        passed = not report.failures
        print(soak.summary(report), flush=True)
        for failure in report.failures:
            print(f"  FAILED: {failure}", flush=True)
        for note in soak.notes:
            print(f"  note: {note}", flush=True)
    finally:
        if not passed:
            kept = f" (database in {soak.db_dir})" if soak.db_dir else ""
            print(f"  evidence and logs kept in {soak.workdir}{kept}", flush=True)
        soak.cleanup(passed)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
