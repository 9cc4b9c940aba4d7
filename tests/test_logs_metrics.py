"""Log formats and the Prometheus endpoint, with a real socket on 127.0.0.1."""

from __future__ import annotations

import faulthandler
import http.client
import json
import logging
import os
import pickle
import re
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from subscriptions import logs
from subscriptions.db.connection import Database
from subscriptions.delivery import metrics
from subscriptions.delivery.claims import Claimer, load_targets
from subscriptions.delivery.metrics import QueueDepth
from subscriptions.delivery.metrics_server import bind
from subscriptions.errors import SubsError

from conftest import Subs, execute


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    faulthandler.enable(file=sys.__stderr__)  # configure() pointed it at the test's logfile


CRASH = """
import ctypes, logging, sys
from subscriptions import logs
logs.configure(logfile=sys.argv[1] or None)
logging.getLogger("subs.test").warning("about to crash")

def call_the_engine():
    ctypes.string_at(0)  # a read of address 0, as a fault in a native library does

call_the_engine()
"""


@pytest.mark.parametrize("where", ["logfile", "stderr"])
def test_a_crash_in_native_code_writes_the_python_stacks_where_the_logs_go(where: str, tmp_path: Path) -> None:
    logfile = tmp_path / "subs.log"
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH, str(logfile) if where == "logfile" else ""],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert crashed.returncode == -signal.SIGSEGV
    log = logfile.read_text() if where == "logfile" else crashed.stderr
    assert "WARNING subs.test: about to crash" in log
    report = log.split("about to crash", 1)[1]
    assert "Fatal Python error: Segmentation fault" in report
    assert re.search(r'File "<string>", line \d+ in call_the_engine', report), report


def test_json_lines_have_extras_and_exceptions(tmp_path: Path) -> None:
    logfile = tmp_path / "subs.log"
    logs.configure(fmt="json", logfile=str(logfile))
    log = logging.getLogger("subs.test")
    log.info("event %s handled", 7, extra={"tag": "orders", "event_id": 7, "path": Path("/x")})
    log.debug("not at INFO")
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("handler failed\nbadly")
    first, second = (json.loads(line) for line in logfile.read_text().splitlines())
    assert first["message"] == "event 7 handled" and first["level"] == "INFO" and first["logger"] == "subs.test"
    assert (first["tag"], first["event_id"], first["path"], first["process"]) == ("orders", 7, "/x", os.getpid())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", first["time"])
    assert "exc" not in first and "args" not in first and "msg" not in first
    assert second["message"] == "handler failed\nbadly" and second["level"] == "ERROR"
    assert second["exc"].startswith("Traceback") and "ZeroDivisionError" in second["exc"]


def test_text_format_and_private_appended_logfile(tmp_path: Path) -> None:
    logfile = tmp_path / "subs.log"
    old_umask = os.umask(0)
    try:
        logs.configure(level="warning", logfile=str(logfile))
    finally:
        os.umask(old_umask)
    logging.getLogger("subs.test").info("hidden")
    logging.getLogger("subs.test").warning("lag is %ss", 3)
    assert stat.S_IMODE(logfile.stat().st_mode) == 0o600
    logs.configure(logfile=str(logfile))
    logging.getLogger("subs.test").info("again")
    lines = logfile.read_text().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING subs.test: lag is 3s", lines[0])
    assert lines[1].endswith(" INFO subs.test: again")


def test_configure_twice_replaces_its_handlers(tmp_path: Path) -> None:
    before = len(logging.getLogger().handlers)
    logs.configure(logfile=str(tmp_path / "one.log"))
    logs.configure(logfile=str(tmp_path / "two.log"))
    logging.getLogger("subs.test").warning("where")
    assert len(logging.getLogger().handlers) == before + 1
    assert (tmp_path / "one.log").read_text() == ""
    assert "where" in (tmp_path / "two.log").read_text()


def test_configure_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        logs.configure(fmt="xml")
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        logs.configure(level="LOUD")
    with pytest.raises(SubsError, match="cannot open logfile .*: No such file or directory; choose another --logfile"):
        logs.configure(logfile=str(tmp_path / "missing" / "subs.log"))


def _samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[0] != "#"}


def test_render_is_prometheus_text_format() -> None:
    m = metrics.Metrics()
    for outcome, seconds in [("handled", 0.003), ("handled", 0.01), ("handled", 0.2), ("failed", 20), ("dead", 1)]:
        m.observe("orders", outcome, seconds)
    m.set_queue(
        [
            QueueDepth(1, "ORDERS", "I", "orders", 4, 2, 12.5, failed=1, dead=3),
            QueueDepth(2, "ORDERS", "U", "idle", 0, 0, None),
        ]
    )
    m.count_claim_conflicts(2)
    m.count_process_exit("handler", "SIGKILL")
    m.count_process_exit("claimer", "reconnect")
    m.count_process_exit("handler", "SIGKILL")
    text = m.render()
    assert text.endswith("\n")
    samples = _samples(text)
    assert samples['subs_events_handled_total{tag="orders"}'] == 3
    assert samples['subs_events_failed_total{tag="orders"}'] == 1
    assert samples['subs_events_dead_total{tag="orders"}'] == 1
    orders = '{subscription="1",table="ORDERS",action="I",tag="orders"}'
    idle = '{subscription="2",table="ORDERS",action="U",tag="idle"}'
    assert samples[f"subs_queue_pending{orders}"] == 5 and samples[f"subs_queue_in_flight{orders}"] == 2
    assert samples[f"subs_queue_failed{orders}"] == 1 and samples[f"subs_queue_failed{idle}"] == 0
    assert samples[f"subs_lag_seconds{orders}"] == 12.5 and samples[f"subs_lag_seconds{idle}"] == 0
    assert samples[f"subs_queue_dead{orders}"] == 3 and samples[f"subs_queue_dead{idle}"] == 0
    assert samples["subs_claim_conflicts_total"] == 2
    assert samples['subs_process_exits_total{process="handler",how="SIGKILL"}'] == 2
    assert samples['subs_process_exits_total{process="claimer",how="reconnect"}'] == 1
    buckets = [(key, value) for key, value in samples.items() if key.startswith("subs_handler_duration_seconds_bucket")]
    assert [key.split('le="')[1][:-2] for key, _ in buckets] == [
        "0.005",
        "0.01",
        "0.025",
        "0.05",
        "0.1",
        "0.25",
        "0.5",
        "1.0",
        "2.5",
        "5.0",
        "10.0",
        "+Inf",
    ]
    assert [value for _, value in buckets] == [1, 2, 2, 2, 2, 3, 3, 4, 4, 4, 4, 5]
    assert samples['subs_handler_duration_seconds_count{tag="orders"}'] == 5
    assert samples['subs_handler_duration_seconds_sum{tag="orders"}'] == pytest.approx(21.213)
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert typed["subs_handler_duration_seconds"] == "histogram" and typed["subs_lag_seconds"] == "gauge"
    assert set(re.findall(r"^# HELP (\S+) \S", text, re.MULTILINE)) == set(typed)
    for name in samples:
        family = re.sub(r"(_bucket|_sum|_count)$", "", name.split("{")[0])
        assert family in typed, name


def test_label_values_are_escaped() -> None:
    m = metrics.Metrics()
    m.observe('we"ird\\tag\nx', "handled", 0.1)
    assert 'subs_events_handled_total{tag="we\\"ird\\\\tag\\nx"} 1\n' in m.render()


def test_observe_rejects_unknown_outcomes() -> None:
    with pytest.raises(ValueError, match="unknown outcome 'ok'"):
        metrics.Metrics().observe("orders", "ok", 0.1)


def test_worker_deltas_merge_into_the_supervisor() -> None:
    supervisor, one, two = metrics.Metrics(), metrics.Metrics(), metrics.Metrics()
    one.observe("orders", "handled", 0.02, sub_id=1)
    two.observe("orders", "handled", 3, sub_id=1)
    two.observe("orders", "failed", 0.001, sub_id=1)
    two.observe("users", "dead", 0.5)
    supervisor.set_queue([QueueDepth(7, "ORDERS", "I", "orders", 4, 1, 2.0)])
    one.count_claim_conflicts(1)
    two.count_claim_conflicts(3)
    one.count_process_exit("handler", "SIGKILL")
    two.count_process_exit("handler", "SIGKILL")
    two.count_process_exit("handler", "code 1")
    supervisor.count_process_exit("claimer", "SIGABRT")
    for worker in (one, two):
        supervisor.merge(pickle.loads(pickle.dumps(worker.snapshot(reset=True))))
    empty = {
        "events": {},
        "durations": {},
        "queue": {},
        "claim_conflicts": 0,
        "process_exits": {},
        "minutes": {},
        "oldest_transaction": 0.0,
    }
    assert one.snapshot() == two.snapshot() == empty
    merged = supervisor.snapshot()
    assert merged["events"] == {
        "orders": {"handled": 2, "failed": 1, "dead": 0},
        "users": {"handled": 0, "failed": 0, "dead": 1},
    }
    assert merged["durations"]["orders"]["buckets"] == [1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0]
    assert merged["durations"]["orders"]["count"] == 3
    assert merged["durations"]["orders"]["sum"] == pytest.approx(3.021)
    assert merged["queue"] == {
        7: {
            "table": "ORDERS",
            "action": "I",
            "tag": "orders",
            "pending": 4,
            "in_flight": 1,
            "failed": 0,
            "lag": 2.0,
            "dead": 0,
        }
    }
    assert merged["claim_conflicts"] == 4
    assert merged["process_exits"] == {("handler", "SIGKILL"): 2, ("handler", "code 1"): 1, ("claimer", "SIGABRT"): 1}
    # Per subscription and minute, for the console's statistics (the minute
    # may have turned between the observations).
    minutes = supervisor.take_minutes()
    assert {sub_id for sub_id, _ in minutes} == {1}
    assert [sum(counts) for counts in zip(*minutes.values())] == [2, 1, 0]
    assert supervisor.take_minutes() == {}


def _get(port: int, path: str, host: str = "127.0.0.1") -> tuple[int, str, str]:
    connection = http.client.HTTPConnection(host, port, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        connection.close()


def test_the_endpoint_answers_metrics_and_404_elsewhere() -> None:
    m = metrics.Metrics()
    m.observe("orders", "handled", 0.1)
    server = bind(m, 0).start()
    try:
        assert server.port > 0
        status, content_type, body = _get(server.port, "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        assert body == m.render()
        assert _get(server.port, "/")[0] == 404
        assert _get(server.port, "/metrics/extra")[0] == 404
    finally:
        server.close()
    with pytest.raises(ConnectionRefusedError):
        _get(server.port, "/metrics")


def test_the_endpoint_serves_an_ipv6_address_too() -> None:
    """``--metrics-host ::1`` was refused: "Address family for hostname not supported"."""
    m = metrics.Metrics()
    server = bind(m, 0, "::1").start()
    try:
        assert _get(server.port, "/metrics", "::1")[:2] == (200, metrics.CONTENT_TYPE)
    finally:
        server.close()


def test_a_host_not_of_this_machine_is_reported() -> None:
    with pytest.raises(SubsError) as error:
        bind(metrics.Metrics(), 0, "192.0.2.1")
    assert str(error.value) == (
        "cannot serve metrics on 192.0.2.1:0: Cannot assign requested address; "
        "choose another --metrics-host or --metrics-port"
    )


def test_a_port_in_use_is_reported() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SubsError) as error:
            bind(metrics.Metrics(), port)
    assert str(error.value) == (
        f"cannot serve metrics on 127.0.0.1:{port}: Address already in use; "
        "choose another --metrics-host or --metrics-port"
    )


def test_queue_gauges_are_per_subscription_and_bounded(settings) -> None:
    """Two subscriptions of one tag keep gauges of their own, and a refresh
    counts each subscription's live events only up to its bound."""
    execute(settings, "CREATE TABLE ORDERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
    execute(settings, "CREATE TABLE USERS (ID INTEGER NOT NULL PRIMARY KEY)")
    Subs(settings).ok("add", "orders", "I", "mail")
    Subs(settings).ok("add", "users", "I", "mail")
    execute(settings, *(f"INSERT INTO ORDERS VALUES ({n}, 'x')" for n in range(25)))
    execute(settings, "INSERT INTO USERS VALUES (1)")
    with Database(settings) as db:
        (target, *_) = load_targets(db)
        Claimer(db, "test:1", 30).claim({target.sub_id: target}, 3)
        depths = {(d.table, d.tag): d for d in metrics.read_queue_depth(db, max_counted=10)}
    assert (depths["ORDERS", "mail"].pending, depths["ORDERS", "mail"].in_flight) == (7, 3)
    assert (depths["USERS", "mail"].pending, depths["USERS", "mail"].in_flight) == (1, 0)
    assert depths["ORDERS", "mail"].oldest_seconds is not None and depths["ORDERS", "mail"].oldest_seconds >= 0
    gauges = metrics.Metrics()
    gauges.set_queue(list(depths.values()))
    pending = [line for line in gauges.render().splitlines() if line.startswith("subs_queue_pending{")]
    assert len(pending) == 2 and all('tag="mail"' in line for line in pending)
    # Every ORDERS event failed once: the 7 counted beside the 3 in flight wait for their retry.
    failing = "UPDATE EVENT_LOG SET LAST_ERROR = 'boom', ATTEMPTS = 1 WHERE SUB_ID = ?"
    execute(settings, failing, params=(target.sub_id,))
    with Database(settings) as db:
        gauges.set_queue(metrics.read_queue_depth(db, max_counted=10))
    samples = _samples(gauges.render())
    orders = f'{{subscription="{target.sub_id}",table="ORDERS",action="I",tag="mail"}}'
    figures = [samples[f"subs_queue_{gauge}{orders}"] for gauge in ("pending", "failed", "in_flight")]
    assert figures == [7, 7, 3]


def test_the_oldest_transaction_gauge_is_the_supervisor_s_own() -> None:
    """Set by its housekeeping (oldest_transaction.py); a worker's delta,
    whose own value is always 0, leaves it as it is."""
    supervisor, worker = metrics.Metrics(), metrics.Metrics()
    assert "\nsubs_oldest_transaction_seconds 0.0\n" in supervisor.render()
    supervisor.set_oldest_transaction(612.5)
    worker.observe("orders", "handled", 0.02)
    supervisor.merge(worker.snapshot(reset=True))
    assert "\nsubs_oldest_transaction_seconds 612.5\n" in supervisor.render()
