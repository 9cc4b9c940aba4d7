"""A `subs listen` process with a recording plugin, and the ITEMS table it
listens to: shared by the listener and reaper tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from firebird.driver import OnlineMode, ShutdownMethod, ShutdownMode, connect_server, driver_config

from subscriptions.db import runtime
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

from conftest import EngineWedged, credentials, query
from processes import cmdline, group, kill_group
from soak_chaos import py_spy_dump

RECORDER = '''
import json, os, signal, time
from subscriptions import hookimpl

RECORD = os.environ["RECORD_FILE"]
KEPT = []  # what "grow" notes leak


def append(event, phase):
    line = {"id": event.id, "attempt": event.attempt, "pid": os.getpid(), "key": event.pk["ID"],
            "tag": event.tag, "sub": event.subscription_id, "phase": phase}
    with open(RECORD, "a") as file:
        file.write(json.dumps(line) + "\\n")


@hookimpl
def register_handlers(register):
    register("rec", handle)
    register("rec2", handle)
    register("audit", write_audit, transactional=True)
    register("brec", handle_batch, batch=True)


def handle(event):
    """Behaves as the row's NOTE says: sleepN (on a first attempt), hang (an
    hour, every attempt), fail, fail_once, fail_flagged (while the file
    RECORD_FILE.fail exists), die_once (SIGKILLs its own process), growN
    (keeps N more MiB for good, as a leaky handler does), or nothing."""
    note = (event.new or event.old or {}).get("NOTE") or ""
    append(event, "start")
    if note.startswith("grow"):
        KEPT.append(b"x" * (int(note[4:]) << 20))
    if note == "die_once" and event.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if note.startswith("sleep") and event.attempt == 1:
        time.sleep(float(note[5:]))
    if note == "hang":
        time.sleep(3600)
    if note == "fail" or (note == "fail_once" and event.attempt == 1):
        raise RuntimeError(f"asked to fail ({note})")
    if note == "fail_flagged" and os.path.exists(RECORD + ".fail"):
        raise RuntimeError("asked to fail (flagged)")
    append(event, "done")


def handle_batch(events):
    """A batch handler: records each event with its batch's size; fails
    those whose NOTE says fail (or fail_once, on a first attempt)."""
    errors = []
    for event in events:
        note = (event.new or event.old or {}).get("NOTE") or ""
        append(event, f"batch of {len(events)}")
        failing = note == "fail" or (note == "fail_once" and event.attempt == 1)
        errors.append(RuntimeError(f"asked to fail ({note})") if failing else None)
    return errors


def write_audit(event):
    event.cursor.execute("INSERT INTO AUDIT (EVENT_ID, ITEM_ID) VALUES (?, ?)", (event.id, event.pk["ID"]))
    if (event.new or {}).get("NOTE") == "fail":
        raise RuntimeError("audit write rolled back")
'''

# The workers (host:pid) of the attachments that serve (sql/attachments.sql).
SERVING_WORKERS = """
SELECT W.MON$VARIABLE_VALUE FROM MON$CONTEXT_VARIABLES W
JOIN MON$CONTEXT_VARIABLES S ON S.MON$ATTACHMENT_ID = W.MON$ATTACHMENT_ID AND S.MON$VARIABLE_NAME = 'SUBS_SERVES'
WHERE W.MON$VARIABLE_NAME = 'SUBS_WORKER'
"""


class Listener:
    """One `subs listen` process with the recording plugin, in a session of
    its own; as a ``job``, in a process group of its own in ours instead, as
    a shell starts it: the kernel drops the terminal's stop signal for a
    group that has no parent in its session (an orphaned group)."""

    def __init__(self, settings, tmp_path: Path, *args: str, job: bool = False) -> None:
        self.settings = settings
        self.record = tmp_path / "record.jsonl"
        plugin = tmp_path / "recorder.py"
        plugin.write_text(RECORDER)
        env = {
            **os.environ,
            "RECORD_FILE": str(self.record),
            **credentials(settings),
        }
        self.log = open(tmp_path / f"listener-{time.monotonic_ns()}.log", "w+")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "subscriptions",
                "-d",
                settings.dsn,
                "listen",
                "--plugin",
                str(plugin),
                "--backoff-min",
                "0.1",
                "--backoff-max",
                "0.2",
                *args,
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=not job,
            process_group=0 if job else None,
        )

    def lines(self) -> list[dict]:
        """The recorded lines so far; a handler may be writing the last one
        as it is read (seen once in CI), so only complete lines count."""
        if not self.record.exists():
            return []
        text = self.record.read_text()
        return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]

    def wait_for(self, condition, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self.lines()):
            if self.process.poll() is not None and not condition(self.lines()):
                raise AssertionError(f"listener exited with {self.process.returncode}: {self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; record: {self.lines()[-5:]}; log: {self.output()[-2000:]}")
            time.sleep(0.05)

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Wait until a claimer of this listener has attached and serves. On
        embedded Firebird the claimer of a fresh, idle database once waited
        inside the engine for over two minutes at its start (the engine's
        hang of SOAK-NOTES finding 8): post_mortem tells that wait from the
        test's failure when the test fails."""
        deadline = time.monotonic() + timeout
        while not self._serving():
            if self.process.poll() is not None:
                raise AssertionError(f"listener exited with {self.process.returncode}: {self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no claimer served in {timeout:g} s")
            time.sleep(0.1)

    def _wedged_at_start(self, stacks: str) -> bool:
        return "libEngine" in stacks and not self._serving()

    def _serving(self) -> bool:
        owners = {f"{socket.gethostname()}:{pid}" for pid in group(self.process.pid)}
        return any(owner in owners for (owner,) in query(self.settings, SERVING_WORKERS))

    def finish(self, timeout: float = 120.0) -> int:
        return self.process.wait(timeout)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stacks(self) -> str:
        """py-spy dumps of the listener's processes (its process group), for
        the engine's waits of SOAK-NOTES finding 8."""
        return "\n".join(py_spy_dump(pid, self.record.with_name(f"stack-{pid}.txt")) for pid in group(self.process.pid))

    def post_mortem(self) -> tuple[str, bool]:
        """What a failed test shows of this listener: its log's end and, while
        it runs, where its processes are; and whether it is wedged at its
        start: no claimer serves yet and they wait inside the engine (any
        other wait is the test's failure)."""
        log = self.output()[-4000:]
        if self.process.poll() is not None:
            return f"exited with {self.process.returncode}; log:\n{log}", False
        stacks = self.stacks()
        return f"log:\n{log}\nstacks:\n{stacks}", self._wedged_at_start(stacks)

    def stop(self) -> None:
        """Kill the listener and its workers (a process group of their own),
        and reap them all."""
        kill_group(self.process, 10)


def insert(settings, first: int, count: int, note: str = "") -> None:
    with Database(settings) as db, db.transaction() as cursor:
        for key in range(first, first + count):
            cursor.execute("INSERT INTO ITEMS VALUES (?, ?)", (key, note))


DISCONNECT_OTHERS = """
import os, sys
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

settings = ConnectionSettings(sys.argv[1], os.environ["ISC_USER"], os.environ["ISC_PASSWORD"] or None)
with Database(settings) as db, db.transaction() as cursor:
    cursor.execute(
        "DELETE FROM MON$ATTACHMENTS WHERE MON$ATTACHMENT_ID <> CURRENT_CONNECTION AND MON$SYSTEM_FLAG = 0"
    )
"""


def disconnect_others(settings, listener: Listener, timeout: float = 90.0) -> None:
    """Disconnect every other attachment of the database, as an operator
    would, in a child process with a bound: on embedded Firebird 4 this
    DELETE once waited for more than 5 minutes while the listener sat idle
    (in a test with no bound, CI would have waited out its 90 minutes).
    A wait that long is the engine's (EngineWedged), with the listener's
    stacks to say where its processes were."""
    env = {**os.environ, "ISC_USER": settings.effective_user, "ISC_PASSWORD": settings.password or ""}
    try:
        subprocess.run([sys.executable, "-c", DISCONNECT_OTHERS, settings.dsn], env=env, check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EngineWedged(
            f"DELETE FROM MON$ATTACHMENTS waited more than {timeout:g} s; the listener's stacks:\n" + listener.stacks()
        ) from None


def handled(lines: list[dict]) -> list[int]:
    return [line["id"] for line in lines if line["phase"] == "done"]


def worker_attached(settings, pid: int) -> bool:
    """Whether worker process ``pid`` has an attachment tagged as its own."""
    tags = "SELECT MON$VARIABLE_VALUE FROM MON$CONTEXT_VARIABLES WHERE MON$VARIABLE_NAME = 'SUBS_WORKER'"
    rows = query(settings, tags)
    return any(value.endswith(f":{pid}") for (value,) in rows)


def remaining(settings) -> int:
    return query(settings, "SELECT COUNT(*) FROM EVENT_LOG")[0][0]


def supervise(settings, tmp_path: Path, monkeypatch, drive, **options):
    """Run a listener's Supervisor in this process (its workers are real
    processes) with the recording plugin, while ``drive(record)`` acts in a
    thread and ends the run with SIGTERM; returns the supervisor and the record."""
    import threading

    from subscriptions.delivery.options import ListenOptions
    from subscriptions.delivery.supervisor import Supervisor

    plugin = tmp_path / "recorder.py"
    plugin.write_text(RECORDER)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("RECORD_FILE", str(record))
    supervisor = Supervisor(ListenOptions(settings=settings, plugins=(str(plugin),), **options))

    def run_drive() -> None:
        try:
            drive(supervisor, record)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    driver = threading.Thread(target=run_drive)
    driver.start()
    assert supervisor.run() == 0
    driver.join()
    return supervisor, record


def spawned_children(pid: int) -> list[int]:
    """The processes ``pid`` started with multiprocessing's spawn; one that
    ends while they are listed is left out (a CI run read the command line
    of a killed claimer just gone: ProcessLookupError)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sorted(int(child) for child in children if "spawn_main" in cmdline(int(child)))


@contextlib.contextmanager
def shut_down(settings: ConnectionSettings) -> Iterator[None]:
    """The database shut down as an operator does for maintenance (full,
    forced: every attachment is cut off and none is let in), online again
    afterwards; through the services API of the Firebird 3 server, or of the
    embedded engine."""
    runtime.load()
    server, path = "", settings.target
    if settings.is_remote:
        server, path = "subs-tests-fb3", settings.dsn.split(":3050/", 1)[1]
        if driver_config.get_server(server) is None:  # connect_server takes a server's name
            config = driver_config.register_server(server)
            config.host.value, config.port.value = "127.0.0.1", "3050"
    with connect_server(server, user=settings.effective_user, password=settings.password) as service:
        service.database.shutdown(database=path, mode=ShutdownMode.FULL, method=ShutdownMethod.FORCED, timeout=0)
    try:
        yield
    finally:
        with connect_server(server, user=settings.effective_user, password=settings.password) as service:
            service.database.bring_online(database=path, mode=OnlineMode.NORMAL)
