"""Pidfile, stop, detach and systemd unit, with real processes and no database."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from subscriptions.cli import cli
from subscriptions.db.processes import cmdline
from subscriptions.errors import SubsError
from subscriptions.ops import detach as daemon
from subscriptions.ops import pidfile as pidfile_module
from subscriptions.ops import systemd

# A stand-in for a listener: "subscriptions" in its argv makes it count as subs.
LISTENER = textwrap.dedent(
    """
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    time.sleep(30)
    """
)
STUBBORN = LISTENER.replace("lambda *_: sys.exit(0)", "signal.SIG_IGN")

DETACHING = textwrap.dedent(
    """
    import logging, os, sys, time
    from subscriptions import logs
    from subscriptions.ops import detach as daemon
    from subscriptions.errors import SubsError
    try:
        daemon.detach(pidfile=sys.argv[1], logfile=sys.argv[2])
    except SubsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)
    logs.configure(fmt="json")
    umask = os.umask(0)
    os.umask(umask)
    logging.getLogger("subs.test").info("daemon up", extra={"cwd": os.getcwd(), "umask": umask})
    while True:
        time.sleep(0.05)
    """
)


def _start(code: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code, "subscriptions"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


@pytest.fixture
def listener() -> Iterator[subprocess.Popen[str]]:
    child = _start(LISTENER)
    yield child
    child.kill()
    child.wait()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A `sleep 30`, once its command line shows: Popen returns as the exec
    begins, and /proc/PID/cmdline stays empty until the new program's
    arguments are in place (seen once in a CI run on a busy machine)."""
    child = subprocess.Popen(["sleep", "30"])
    deadline = time.monotonic() + 10
    while cmdline(child.pid) != ["sleep", "30"] and time.monotonic() < deadline:
        time.sleep(0.01)
    yield child
    child.kill()
    child.wait()


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/srv/.venv/bin/python3", "/srv/.venv/bin/subs", "listen"], True),
        (["/usr/local/bin/subs", "listen"], True),
        (["python3.11", "-m", "subscriptions", "listen"], True),
        (["python3", "-c", "pass", "subscriptions"], True),
        (["sleep", "30"], False),
        (["python3", "-m", "pytest", "tests/test_subscriptions_cli.py"], False),
        (["vim", "subs"], False),
        ([], False),
    ],
)
def test_is_subs_rule(argv: list[str], expected: bool) -> None:
    assert pidfile_module.is_subs(argv) is expected


def test_pidfile_create_is_atomic_0644_and_removed_only_by_owner(tmp_path: Path) -> None:
    path = tmp_path / "subs.pid"
    pidfile = pidfile_module.PidFile(str(path))
    old_umask = os.umask(0o077)
    try:
        pidfile.create()
    finally:
        os.umask(old_umask)
    assert path.read_text() == f"{os.getpid()}\n"
    assert _mode(path) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["subs.pid"]
    pidfile.remove(pid=os.getpid() + 1)
    assert path.exists()
    pidfile.remove()
    assert not path.exists()
    pidfile.remove()


def test_pidfile_refuses_a_running_subs(tmp_path: Path, listener: subprocess.Popen[str]) -> None:
    path = tmp_path / "subs.pid"
    pidfile_module.PidFile(str(path)).create(listener.pid)
    with pytest.raises(SubsError) as error:
        pidfile_module.PidFile(str(path)).create()
    assert str(error.value) == (
        f"subs is already running with pid {listener.pid} (pidfile {path}); stop it with `subs stop --pidfile {path}`"
    )
    assert path.read_text() == f"{listener.pid}\n"


@pytest.mark.parametrize("content", ["dead", "reused", "garbage"])
def test_pidfile_replaces_a_stale_one(tmp_path: Path, sleeper: subprocess.Popen[bytes], content: str) -> None:
    path = tmp_path / "subs.pid"
    path.write_text({"dead": f"{_dead_pid()}\n", "reused": f"{sleeper.pid}\n", "garbage": "oops"}[content])
    pidfile_module.PidFile(str(path)).create()
    assert path.read_text() == f"{os.getpid()}\n"


def test_stop_without_pidfile(tmp_path: Path) -> None:
    path = tmp_path / "subs.pid"
    with pytest.raises(SubsError, match=f"^no pidfile at {path}; is subs running\\?$"):
        daemon.stop(str(path))


@pytest.mark.parametrize("garbage", ["not a pid\n", "1\n", "-5\n", "4194305\n", "99999999999999999999\n"])
def test_stop_with_garbage_pidfile(tmp_path: Path, garbage: str) -> None:
    """Past the kernel's largest pid, too (os.kill raised OverflowError)."""
    path = tmp_path / "subs.pid"
    path.write_text(garbage)
    with pytest.raises(SubsError, match="does not hold a pid .*remove it if subs is not running"):
        daemon.stop(str(path))
    assert path.exists()


def test_stop_with_stale_pidfile_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "subs.pid"
    pid = _dead_pid()
    path.write_text(f"{pid}\n")
    with pytest.raises(SubsError) as error:
        daemon.stop(str(path))
    assert str(error.value) == f"pidfile {path} names pid {pid}, which is not running (stale pidfile removed)"
    assert not path.exists()


def test_stop_refuses_to_signal_an_unrelated_process(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    path = tmp_path / "subs.pid"
    path.write_text(f"{sleeper.pid}\n")
    with pytest.raises(SubsError, match=f"names pid {sleeper.pid}, which is not subs \\(sleep 30\\); not signalling"):
        daemon.stop(str(path))
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(0.2)  # it was not signalled: still running
    assert path.exists()


def test_stop_terminates_a_subs_process(tmp_path: Path, listener: subprocess.Popen[str]) -> None:
    path = tmp_path / "subs.pid"
    path.write_text(f"{listener.pid}\n")
    assert daemon.stop(str(path), timeout=5) == listener.pid
    assert listener.wait(timeout=1) == 0
    assert not path.exists()


def test_stop_reports_a_process_that_does_not_exit(tmp_path: Path) -> None:
    stubborn = _start(STUBBORN)
    try:
        path = tmp_path / "subs.pid"
        path.write_text(f"{stubborn.pid}\n")
        with pytest.raises(
            SubsError, match=f"still running 0.3s after SIGTERM, .*--grace; .*`kill -KILL {stubborn.pid}`"
        ):
            daemon.stop(str(path), timeout=0.3)
        assert stubborn.poll() is None
    finally:
        stubborn.kill()
        stubborn.wait()


def _run_detaching(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "detaching.py"
    script.write_text(DETACHING)
    return subprocess.run(
        [sys.executable, str(script), "run/subs.pid", "subs.log", "subscriptions"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=10,
    )


def _wait_for_line(path: Path, deadline: float) -> str:
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"nothing logged to {path}")


def test_detach_runs_in_background_until_stopped(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    pidfile, logfile = tmp_path / "run" / "subs.pid", tmp_path / "subs.log"
    started = time.monotonic()
    result = _run_detaching(tmp_path)
    try:
        assert (result.returncode, result.stderr) == (0, "")
        assert time.monotonic() - started < 5
        pid = int(pidfile.read_text())
        assert result.stdout == f"subs listening in the background, pid {pid} (log: subs.log)\n"
        assert pidfile_module.is_alive(pid) and pid != os.getpid()
        assert _mode(pidfile) == 0o644
        assert _mode(logfile) == 0o600
        entry = json.loads(_wait_for_line(logfile, started + 5))
        assert entry["message"] == "daemon up" and entry["process"] == pid
        assert entry["cwd"] == str(tmp_path) and entry["umask"] == 0o027
        assert daemon.stop(str(pidfile), timeout=5) == pid
        assert not pidfile_module.is_alive(pid)
        assert not pidfile.exists()
    finally:
        if pidfile.exists() and pidfile_module.is_alive(pid := int(pidfile.read_text())):
            os.kill(pid, signal.SIGKILL)


def test_detach_reports_a_running_listener_as_an_error(tmp_path: Path, listener: subprocess.Popen[str]) -> None:
    (tmp_path / "run").mkdir()
    pidfile = tmp_path / "run" / "subs.pid"
    pidfile.write_text(f"{listener.pid}\n")
    result = _run_detaching(tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        f"Error: subs is already running with pid {listener.pid} (pidfile {pidfile}); "
        f"stop it with `subs stop --pidfile {pidfile}`\n"
    )
    assert result.stdout == ""
    assert pidfile.read_text() == f"{listener.pid}\n"


def test_systemd_unit() -> None:
    unit = systemd.systemd_unit(
        executable="/opt/my apps/.venv/bin/subs",
        arguments=["--database", "/data/100% sure.fdb", "listen", "--log-format", "json", 'say "$HOME"'],
        working_directory="/srv/subs work",
        environment_file="/etc/subs/subs.env",
        grace=30,
        user="subs",
    )
    lines = unit.splitlines()
    assert lines[:4] == [
        "[Unit]",
        "Description=subs listener",
        "Wants=network-online.target",
        "After=network-online.target",
    ]
    assert (
        'ExecStart="/opt/my apps/.venv/bin/subs" --database "/data/100%% sure.fdb" listen --log-format json '
        '"say \\"$$HOME\\""'
    ) in lines
    for line in [
        "[Service]",
        "Type=simple",
        "WorkingDirectory=/srv/subs work",
        "EnvironmentFile=-/etc/subs/subs.env",
        "User=subs",
        "Restart=on-failure",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=60",
        "[Install]",
        "WantedBy=multi-user.target",
    ]:
        assert line in lines
    assert "password" not in unit.lower()
    without_user = systemd.systemd_unit(
        executable="/usr/bin/subs",
        arguments=["listen"],
        working_directory="/",
        environment_file="/etc/subs.env",
        grace=30,
    )
    assert "User=" not in without_user and "ExecStart=/usr/bin/subs listen" in without_user.splitlines()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """systemd's own parser: an unbalanced quote or a relative path fails verification."""
    home = tmp_path / "my 100% apps"
    home.mkdir()
    executable = home / "subs"
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    unit = tmp_path / "subs-test.service"
    unit.write_text(
        systemd.systemd_unit(
            executable=str(executable),
            arguments=["-d", str(home / "it's.fdb"), "listen", 'a "quoted" \\ word', ""],
            working_directory=str(home),
            environment_file=str(tmp_path / "missing.env"),
            grace=30,
        )
    )
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("argument", ["--password", "--password=secret"])
def test_systemd_unit_refuses_a_password_argument(argument: str) -> None:
    with pytest.raises(ValueError, match="ISC_PASSWORD"):
        systemd.systemd_unit(
            executable="/usr/bin/subs",
            arguments=[argument, "secret", "listen"],
            working_directory="/srv",
            environment_file="/etc/subs.env",
            grace=30,
        )


@pytest.mark.parametrize(("grace", "stop_timeout"), [([], 60), (["--grace", "120"], 150), (["--grace", "0.5"], 31)])
def test_systemd_gives_the_listener_its_grace_before_killing_it(tmp_path: Path, grace: list[str], stop_timeout: int):
    """Before, TimeoutStopSec was 60 whatever --grace said: with --grace 120
    systemd killed the handlers a minute early, and their events came back
    only once their lease ran out."""
    result = CliRunner().invoke(cli, ["-d", str(tmp_path / "app.fdb"), "systemd-unit", *grace])
    assert result.exit_code == 0, result.output
    assert f"TimeoutStopSec={stop_timeout}" in result.stdout.splitlines()


def test_systemd_unit_says_the_password_belongs_in_the_environment_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["-d", str(tmp_path / "app.fdb"), "--password", "s3cret", "systemd-unit", "--environment-file", "/x.env"]
    )
    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.output
    assert result.stderr == "note: the unit leaves out --password; put ISC_PASSWORD=... in /x.env\n"


def test_systemd_unit_attaches_as_the_user_and_role_of_its_command_line(tmp_path: Path) -> None:
    """Who the command line names goes into the unit; ISC_USER and SUBS_ROLE
    from the shell are left to the environment file, where the password is."""
    runner = CliRunner()
    database = str(tmp_path / "app.fdb")
    named = runner.invoke(
        cli, ["-d", database, "--user", "listener", "--role", '"Mixed Role"', "systemd-unit", "--poll", "5"]
    )
    assert named.exit_code == 0, named.output
    assert f' -d {database} --user listener --role "\\"Mixed Role\\"" listen --poll 5\n' in named.output
    from_shell = runner.invoke(
        cli, ["-d", database, "systemd-unit"], env={"ISC_USER": "listener", "SUBS_ROLE": "listeners"}
    )
    assert from_shell.exit_code == 0, from_shell.output
    assert "--user" not in from_shell.output and "--role" not in from_shell.output
    assert f" -d {database} listen\n" in from_shell.output
