"""Running the listener the way an operator does, end to end on both engines:
`listen --detach`, `status`, `stop`, `--metrics-port`, `systemd-unit`; and
that the password never shows up in what we print, log or put in argv."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from subscriptions.cli import cli
from subscriptions.config import ENVIRONMENT, load_config, unknown_variables_note
from subscriptions.errors import SubsError
from subscriptions.ops import detach as daemon
from subscriptions.plugins import PLUGINS_ENV

from conftest import Subs, execute, free_port, query, scrape_metrics, wait_until

PLUGIN = """
import os
from subscriptions import hookimpl


@hookimpl
def register_handlers(register):
    register("rec", lambda event: open(os.environ["RECORD_FILE"], "a").write(f"{event.id}\\n"))
"""


@pytest.fixture
def rec(settings, tmp_path):
    execute(settings, "CREATE TABLE ITEMS (ID INTEGER NOT NULL PRIMARY KEY)")
    Subs(settings).ok("add", "items", "I", "rec")
    (tmp_path / "plugin.py").write_text(PLUGIN)
    return settings


def environment(settings, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RECORD_FILE": str(tmp_path / "record.txt"),
        "ISC_USER": settings.effective_user,
        "ISC_PASSWORD": settings.password or "",
    }


def subs(settings, tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subscriptions", "-d", settings.dsn, *args],
        env=environment(settings, tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def handled(tmp_path: Path) -> int:
    record = tmp_path / "record.txt"
    return len(record.read_text().split()) if record.exists() else 0


def process_tree(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(descendant for child in children for descendant in process_tree(int(child)))]


def argv(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_detach_status_stop(rec, tmp_path):
    pidfile, logfile = tmp_path / "subs.pid", tmp_path / "subs.log"
    started = subs(
        rec,
        tmp_path,
        "listen",
        "--detach",
        "--pidfile",
        str(pidfile),
        "--logfile",
        str(logfile),
        "--plugin",
        str(tmp_path / "plugin.py"),
        "--mode",
        "parallel",
        "--workers",
        "2",
        "--poll",
        "1",
    )
    assert started.returncode == 0, started.stderr
    pid = int(pidfile.read_text())
    assert f"pid {pid}" in started.stdout
    try:
        execute(rec, "INSERT INTO ITEMS VALUES (1)", "INSERT INTO ITEMS VALUES (2)")
        wait_until(lambda: handled(tmp_path) == 2)
        status = subs(rec, tmp_path, "status", "--json")
        assert status.returncode == 0, status.stderr
        row = json.loads(status.stdout)[0]
        assert (row["tag"], row["pending"], row["in_flight"], row["dead"]) == ("rec", 0, 0, 0)
        tree = process_tree(pid)
        assert len(tree) >= 3, tree  # the supervisor and its two workers (and spawn's resource tracker)
        logfile.rename(tmp_path / "subs.log.1")  # as logrotate does: the listener goes on in a new file
        if rec.password:
            for member in tree:
                assert rec.password not in argv(member)
    finally:
        stopped = subs(rec, tmp_path, "stop", "--pidfile", str(pidfile))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == f"stopped subs listener pid {pid}"
    assert not pidfile.exists() and not daemon.is_alive(pid)
    rotated, log = (tmp_path / "subs.log.1").read_text(), logfile.read_text()
    assert "listening on" in rotated and "listening on" not in log and "stopping" in log
    assert "INFO subs.listener: stopped: 2 handled, 0 failed attempt(s), 0 died since the start\n" in log, log
    assert oct(logfile.stat().st_mode & 0o777) == "0o600"
    if rec.password:
        assert rec.password not in rotated + log
    assert query(rec, "SELECT COUNT(*) FROM EVENT_LOG") == [(0,)]


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_metrics_endpoint_on_loopback(rec, tmp_path):
    port = free_port()
    listener = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "subscriptions",
            "-d",
            rec.dsn,
            "listen",
            "--plugin",
            str(tmp_path / "plugin.py"),
            "--metrics-port",
            str(port),
            "--poll",
            "1",
        ],
        env=environment(rec, tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        execute(rec, "INSERT INTO ITEMS VALUES (1)")
        wait_until(lambda: handled(tmp_path) == 1)
        wait_until(lambda: 'subs_events_handled_total{tag="rec"} 1' in scrape_metrics(port))
        gauge = re.compile(r'^subs_queue_pending\{subscription="\d+",table="ITEMS",action="I",tag="rec"\} 0$', re.M)
        wait_until(lambda: gauge.search(scrape_metrics(port)))  # refreshed every --poll
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        listener.terminate()
        _, stderr = listener.communicate(timeout=60)
    assert listener.returncode == 0, stderr
    if rec.password:
        assert rec.password not in stderr


@pytest.mark.parametrize("detach", [False, True])
def test_a_metrics_port_in_use_is_refused_before_the_listener_starts(rec, tmp_path, detach):
    """Before, the port was taken after the listener's start-up: in the
    background the error reached only the log, after `listen --detach` had
    said it was listening."""
    files = ["--detach", "--pidfile", "subs.pid", "--logfile", "subs.log"] if detach else []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subs(rec, tmp_path, "listen", "--plugin", "plugin.py", "--metrics-port", str(port), *files)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"Error: cannot serve metrics on 127.0.0.1:{port}: Address already in use; "
        "choose another --metrics-host or --metrics-port\n"
    )
    assert not (tmp_path / "subs.pid").exists() and not (tmp_path / "subs.log").exists()


def test_systemd_unit_keeps_the_password_out(rec, tmp_path):
    result = subs(
        rec,
        tmp_path,
        "systemd-unit",
        "--environment-file",
        "/etc/subs/app.env",
        "--run-as",
        "subs",
        "--mode",
        "parallel",
        "--workers",
        "3",
    )
    assert result.returncode == 0, result.stderr
    unit = result.stdout
    assert "EnvironmentFile=-/etc/subs/app.env" in unit and "User=subs" in unit
    assert "listen --mode parallel --workers 3" in unit
    assert rec.target in unit or rec.dsn in unit
    if rec.password:
        assert rec.password not in unit
    refused = subs(rec, tmp_path, "systemd-unit", "--password", "x")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    for bad, said in ((["--workers", "0"], "Invalid value for '--workers'"), (["--frobnicate"], "No such option")):
        refused = subs(rec, tmp_path, "systemd-unit", *bad)
        assert refused.returncode == 2 and refused.stdout == "", refused.stdout
        assert len(refused.stderr.strip().splitlines()) == 1 and said in refused.stderr, refused.stderr


SECRETS = """
[database]
user = "app"
password = ""
[handlers.webhook]
url = "https://hooks.example.com/in"
headers = { Authorization = "Bearer abc", Accept = "application/json" }
[handlers.audit]
use = "webhook"
url = "https://subs:hunter2@audit.example.com/in"
secret = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"
[handlers.exec]
command = ["/bin/true", "https://a:b@c"]
env = { API_TOKEN = "x", PATH = "/bin" }
[handlers.nats]
url = ["nats://h1:4222", "nats://subs:pw@h2:4222"]
creds = "/etc/subs/nats.creds"
"""


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644, 0o604])
def test_a_config_file_others_can_read_is_named_when_it_holds_secrets(tmp_path: Path, mode: int) -> None:
    """Every secret is named by where it is, never by its value; a file only
    its owner and group can read, and one with no secrets, get no note."""
    config = tmp_path / "subs.toml"
    config.write_text(SECRETS)
    config.chmod(mode)
    note = load_config(str(config), environ={}).note
    if not mode & 0o004:
        assert note is None
        return
    assert note == (
        f"config file {config} holds secrets ([handlers.webhook.headers] Authorization, [handlers.audit] url, "
        "[handlers.audit] secret, [handlers.exec] command, [handlers.exec.env] API_TOKEN, [handlers.nats] url) "
        f"that other users can read (mode {mode:o}); make it private: chmod o-rwx {config}"
    )
    config.write_text('[database]\nuser = "app"\n[handlers.webhook]\nurl = "https://hooks.example.com/in"\n')
    assert load_config(str(config), environ={}).note is None


def test_environment_variables_subs_does_not_read_are_named_with_the_closest_it_does() -> None:
    """A misspelt SUBS_DATABSE was ignored in silence, and subs opened
    ./subs.fdb; a SUBS__SEND_EMAIL_PASSWORD (one underscore short) left the
    mail login without its password."""
    environ = {
        "SUBS_DATABSE": "app.fdb",
        "SUBS__SEND_EMAIL_PASSWORD": "not shown",
        "SUBS_ROLE": "r",
        "SUBS__WEBHOOK__URL": "http://h/",
        "SUBS_EVENT_ID": "7",  # an exec command that runs subs
        "PATH": "/bin",
    }
    assert unknown_variables_note(environ) == (
        "subs ignores the environment variable(s) SUBS_DATABSE (SUBS_DATABASE?), SUBS__SEND_EMAIL_PASSWORD: "
        "it reads SUBS_CONFIG, SUBS_DATABASE, SUBS_PLUGINS, SUBS_ROLE, SUBS_RUNTIME_DIR, SUBS_WEB_TOKEN and "
        "SUBS__<TAG>__<KEY> for a handler's setting"
    )
    assert unknown_variables_note({"SUBS_DATABASE": "app.fdb", "SUBS__LOG__PATH": "/tmp/x"}) is None
    result = CliRunner().invoke(cli, ["handlers"], env={"SUBS_PLUGIN": "./mine.py"})
    assert result.exit_code == 0
    assert result.stderr.startswith("note: subs ignores the environment variable(s) SUBS_PLUGIN (SUBS_PLUGINS?): ")


def test_every_environment_variable_subs_reads_is_known() -> None:
    """The note above names any other: a variable an option or module reads
    must be in config.ENVIRONMENT."""
    options = [("", cli), *cli.commands.items()]
    read = {param.envvar for _, command in options for param in command.params if isinstance(param.envvar, str)}
    read |= {PLUGINS_ENV, "SUBS_RUNTIME_DIR"}
    assert {name for name in read if name.startswith("SUBS_")} == ENVIRONMENT


def test_a_config_file_that_cannot_be_read_is_a_one_line_error(tmp_path: Path, monkeypatch) -> None:
    """Not a traceback: the tests run as root, who reads any file, so the
    refusal of another user's file is given by a stand-in."""
    (tmp_path / "folder.toml").mkdir()
    with pytest.raises(SubsError, match=r"config file .*folder.toml is not a file; check --config/SUBS_CONFIG$"):
        load_config(str(tmp_path / "folder.toml"))
    private = tmp_path / "private.toml"
    private.write_text("[handlers.log]\n")

    def refused(self: Path, encoding: str | None = None) -> str:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", refused)
    with pytest.raises(SubsError, match=r"private.toml cannot be read: Permission denied; check its permissions$"):
        load_config(str(private))


@pytest.mark.parametrize("engine", ["fb3"], indirect=True)
def test_password_from_the_config_file_only(rec, tmp_path):
    """No ISC_PASSWORD and no --password: [database] in subs.toml is enough, and
    the password shows up in nothing we print."""
    config = tmp_path / "subs.toml"
    config.write_text(f'[database]\ndsn = "{rec.dsn}"\nuser = "{rec.effective_user}"\npassword = "{rec.password}"\n')
    config.chmod(0o600)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("ISC_", "SUBS_"))}
    outputs = []
    for args in (["status"], ["list", "--json"], ["dead"], ["systemd-unit"], ["handlers"]):
        result = subprocess.run(
            [sys.executable, "-m", "subscriptions", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, (args, result.stderr)
        outputs.append(result.stdout + result.stderr)
    assert "rec" in outputs[0] and f"WorkingDirectory={tmp_path}" in outputs[3]  # finds ./subs.toml
    assert not any(rec.password in output for output in outputs)
    config.chmod(0o644)
    shown = subprocess.run(
        [sys.executable, "-m", "subscriptions", "list"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert (shown.returncode, shown.stderr) == (
        0,
        "note: config file subs.toml holds secrets ([database] password) that other users can read (mode 644); "
        "make it private: chmod o-rwx subs.toml\n",
    )
    config.write_text(config.read_text().replace(rec.password, "not-the-password"))
    refused = subprocess.run(
        [sys.executable, "-m", "subscriptions", "status"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and "password was rejected" in refused.stderr
    assert "not-the-password" not in refused.stderr
