"""The built-in handlers against real peers on 127.0.0.1 (subprocesses,
files; the webhook's HTTP server is test_webhook.py's, send_email's SMTP
server test_send_email.py's), and the subscriptions.testing helpers. No
database is needed."""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import sys
import time
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from subscriptions.builtin import exec as exec_plugin
from subscriptions.builtin import log as log_plugin
from subscriptions.builtin import nats_relay, send_email, webhook
from subscriptions.errors import SubsError
from subscriptions.plugins import BUILTIN_TAGS
from subscriptions.testing import deliver, load_handlers, make_event

from conftest import read_only_mount

LOOPBACK = "127.0.0.1"


def handler(tag: str, settings: dict[str, Any]):
    """The function the listener would call for ``tag`` with these settings."""
    return load_handlers(config={tag: settings})[tag]


# --- exec ----------------------------------------------------------------------


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def test_exec_passes_event_json_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "stdin.json"
    command = python("import sys, pathlib; pathlib.Path(sys.argv[1]).write_bytes(sys.stdin.buffer.read())", str(out))
    deliver(handler("exec", {"command": command}), make_event("exec", table="ORDERS", id=9))
    body = json.loads(out.read_text("utf-8"))
    assert body["id"] == 9 and body["table"] == "ORDERS" and body["tag"] == "exec"


def test_exec_gives_the_event_and_env_but_no_secret_of_subs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISC_PASSWORD", "db-secret")
    monkeypatch.setenv("SUBS__WEBHOOK__SECRET", "whsec_hidden")
    monkeypatch.setenv("SUBS_DATABASE", "/srv/app.fdb")
    monkeypatch.setenv("LANG_OF_HOST", "kept")
    out = tmp_path / "env.json"
    command = python("import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))", str(out))
    settings = {"command": command, "env": {"API_TOKEN": "t0k", "RETRIES": 3}}
    deliver(
        handler("exec", settings), make_event("exec", table="ORDERS", action="U", id=9, attempt=2, database_id="d1")
    )
    seen = json.loads(out.read_text())
    assert "ISC_PASSWORD" not in seen and not [name for name in seen if name.startswith("SUBS__")]
    assert "SUBS_DATABASE" not in seen and seen["LANG_OF_HOST"] == "kept"
    assert (seen["API_TOKEN"], seen["RETRIES"]) == ("t0k", "3")
    assert {name: value for name, value in seen.items() if name.startswith("SUBS_")} == {
        "SUBS_EVENT_ID": "9",
        "SUBS_IDEMPOTENCY_KEY": "d1:9",
        "SUBS_TABLE": "ORDERS",
        "SUBS_ACTION": "U",
        "SUBS_TAG": "exec",
        "SUBS_ATTEMPT": "2",
    }


def test_exec_splits_a_string_command_and_uses_cwd(tmp_path: Path) -> None:
    code = "import pathlib; pathlib.Path('here.txt').write_text('ok')"
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    deliver(handler("exec", {"command": command, "cwd": str(tmp_path)}), make_event("exec"))
    assert (tmp_path / "here.txt").read_text() == "ok"


def test_exec_reports_exit_status_and_stderr_tail() -> None:
    command = python("import sys; sys.stderr.write('x' * 500 + ' disk full'); sys.exit(3)")
    with pytest.raises(RuntimeError, match=r"exit status 3: x+ disk full$") as failure:
        deliver(handler("exec", {"command": command}), make_event("exec"))
    assert str(failure.value).count("x") <= 200


def test_exec_kills_command_after_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"killed after 0.5 s"):
        deliver(
            handler("exec", {"command": python("import time; time.sleep(30)"), "timeout": "0.5"}), make_event("exec")
        )
    assert time.monotonic() - start < 3


def test_exec_configuration_errors() -> None:
    with pytest.raises(SubsError, match=r"\[handlers\.exec\] command = .*SUBS__EXEC__COMMAND"):
        handler("exec", {})
    with pytest.raises(SubsError, match=r"\[handlers\.exec\] env must be a table"):
        load_handlers(config={"exec": {"command": "true", "env": "A=1"}})


def test_exec_checks_its_program_and_folder_at_start_up(tmp_path: Path) -> None:
    """A typo is one start-up error, not a failed attempt per event; the
    program is looked up as the command will be: on the PATH its ``env``
    gives, a relative path from its ``cwd``."""
    (tmp_path / "bin").mkdir()
    script, not_runnable = tmp_path / "bin" / "on-change", tmp_path / "bin" / "notes.txt"
    script.write_text(f"#!{sys.executable}\nimport pathlib; pathlib.Path('ran').write_text('yes')\n")
    script.chmod(0o755)
    not_runnable.write_text("")
    errors = {
        "no such program": ({"command": "on-chnage --quiet"}, "command: there is no program on-chnage on the PATH"),
        "not runnable": ({"command": [str(not_runnable)]}, f"command: {not_runnable} is not a program this user may"),
        "no such folder": ({"command": "true", "cwd": str(tmp_path / "gone")}, f"cwd {tmp_path / 'gone'}: there is no"),
    }
    for settings, fragment in errors.values():
        with pytest.raises(SubsError) as error:
            handler("exec", settings)
        assert str(error.value).startswith("[handlers.exec] ") and fragment in str(error.value)
    on_the_path = {"command": "on-change", "cwd": str(tmp_path), "env": {"PATH": str(tmp_path / "bin")}}
    deliver(handler("exec", on_the_path), make_event("exec"))
    deliver(handler("exec", {"command": "bin/on-change", "cwd": str(tmp_path)}), make_event("exec"))
    assert (tmp_path / "ran").read_text() == "yes"


def test_exec_reports_a_program_gone_since_start_up(tmp_path: Path) -> None:
    program = tmp_path / "on-change"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    run = handler("exec", {"command": [str(program)]})
    program.unlink()
    with pytest.raises(SubsError, match=rf"cannot run '{program}': No such file or directory"):
        deliver(run, make_event("exec"))


# --- log -------------------------------------------------------------------------


def test_log_appends_json_lines_to_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = handler("log", {"path": str(path)})
    values = {"ID": 1, "PRICE": Decimal("1.50"), "DAY": dt.date(2024, 2, 29), "BLOB": b"\x00\xff"}
    deliver(log, make_event("log", new=values))
    deliver(log, make_event("log", action="D", id=2))
    first, second = (json.loads(line) for line in path.read_text("utf-8").splitlines())
    assert first["new"] == {"ID": 1, "PRICE": "1.50", "DAY": "2024-02-29", "BLOB": "AP8="}
    assert second["action"] == "D" and second["old"] == {"ID": 2} and second["new"] is None


def test_log_writes_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    deliver(handler("log", {}), make_event("log", table="ORDERS"))
    line = capsys.readouterr().out
    assert line.endswith("\n") and json.loads(line)["table"] == "ORDERS"


# --- subscriptions.testing ----------------------------------------------------


def test_make_event_defaults() -> None:
    insert = make_event()
    assert (insert.tag, insert.table, insert.action, insert.attempt, insert.subscription_id) == ("test", "T", "I", 1, 1)
    assert insert.pk == {"ID": 1} and insert.new == {"ID": 1} and insert.old is None
    assert abs((dt.datetime.now() - insert.created_at).total_seconds()) < 60
    update = make_event(action="U", id=3)
    assert update.old == update.new == update.pk == {"ID": 3}
    delete = make_event(action="D", pk={"CODE": "x"})
    assert delete.old == {"CODE": "x"} and delete.new is None
    with pytest.raises(ValueError):
        make_event(action="X")


def test_load_handlers_finds_the_configured_builtins() -> None:
    config = {
        "log": {},
        "webhook": {"url": "http://127.0.0.1:9/hook"},
        "send_email": {"from": "s@example.com", "to": "a@example.com"},
        "exec": {"command": "true"},
        "nats": {"url": "nats://127.0.0.1:9"},
    }
    assert not set(config) & set(load_handlers()), "built-ins are opt-in"
    handlers = load_handlers(config=config)
    assert sorted(handlers) == list(BUILTIN_TAGS), "what `subs handlers` names when none is active"
    for name in config:
        assert handlers[name].plugin == ("builtin:nats_relay" if name == "nats" else f"builtin:{name}")
        assert handlers[name].transactional is False


def test_a_builtins_tag_can_go_to_another_handler(tmp_path: Path) -> None:
    """``[handlers.send_email] use = "log"``: the demo's send_email events
    logged rather than mailed. Before, the send_email built-in still took
    the tag and refused the table for its missing sender."""
    handlers = load_handlers(config={"send_email": {"use": "log", "path": str(tmp_path / "mail.jsonl")}})
    assert handlers["send_email"].plugin == "builtin:log (as send_email)"
    deliver(handlers["send_email"], make_event("send_email", id=3))
    assert json.loads((tmp_path / "mail.jsonl").read_text())["id"] == 3


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"webhook": {}}, "handler 'webhook' has no url"),
        ({"hook2": {"use": "webhook", "url": "ftp://x"}}, "[handlers.hook2] url must start with http"),
        ({"send_email": {"from": "s@example.com"}}, "handler 'send_email' has no recipient"),
        ({"send_email": {"from": "s@x", "to": "a@x", "port": "25x"}}, "port must be a positive number"),
        ({"exec": {"command": []}}, "handler 'exec' has no command"),
        ({"exec": {"command": "true", "timeout": -1}}, "timeout must be a positive number"),
        ({"exec": {"command": "true", "timeout": 1e300}}, "timeout must be a positive number up to 86400, not 1e+300"),
        ({"webhook": {"url": "http://x", "timeout": "nan"}}, "timeout must be a positive number up to 86400"),
        ({"send_email": {"from": "s@x", "to": "a@x", "port": 70000}}, "port must be a positive number up to 65535"),
        (
            {"webhook": {"url": "http://x", "timout": 3}},
            "[handlers.webhook] has no setting timout (webhook reads ca_file, client_cert, client_key, headers, "
            "secret, timeout, url); check its spelling in subs.toml or in SUBS__WEBHOOK__* environment variables",
        ),
        (
            {"audit": {"use": "webhook", "url": "http://x", "secert": "x"}},
            "[handlers.audit] has no setting secert",
        ),
        ({"log": {"path": "/tmp/x", "pathh": "/tmp/y"}}, "[handlers.log] has no setting pathh (log reads path)"),
        ({"log": {"path": "/no/such/folder/events.jsonl"}}, "path /no/such/folder/events.jsonl: there is no folder"),
        ({"events": {"use": "log", "path": 7}}, "[handlers.events] path must be a file name (a string), not 7"),
        ({"a": {"use": "b"}, "b": {"use": "log"}}, "[handlers.a] uses 'b', itself an alias: write use = 'log'"),
        ({"b": {"use": "log"}, "a": {"use": "b"}}, "[handlers.a] uses 'b', itself an alias: write use = 'log'"),
        ({"a": {"use": "nosuch"}}, "[handlers.a] uses 'nosuch', but no plugin registers that tag"),
        ({"log": {"use": "log"}}, "[handlers.log] uses its own tag; remove use, or name another handler"),
        ({"a": {"use": "b"}, "b": {"use": "a"}}, "[handlers.a] and [handlers.b] use each other; one must"),
        ({"my tag": {"use": "log"}}, "[handlers.my tag]: 'my tag' is not a tag; name the table after one: a letter"),
        ({"9lives": {}}, "[handlers.9lives]: '9lives' is not a tag"),
        ({"send_email": {"from": "s@x", "to": "a@x", "tls": True, "user": "u"}}, "has no setting tls, user"),
        ({"exec": {"command": "x", "args": ["-v"]}}, "[handlers.exec] has no setting args"),
        ({"exec": {"command": "/bin/true", "env": {"A=B": "x"}}}, "env: 'A=B' is not a variable name; leave out '='"),
        ({"exec": {"command": "/bin/true", "env": {"TOKEN": "s3\0cret"}}}, "env TOKEN holds a NUL byte"),
        ({"exec": {"command": "/bin/true", "env": {"TOKEN": ["a"]}}}, "env TOKEN must be text, not list"),
        ({"exec": {"command": "true", "env": {"SUBS_TABLE": "T"}}}, "env: SUBS_TABLE is set by subs to the event's"),
        ({"exec": {"command": ["true", {"a": 1}]}}, "[handlers.exec] command word 2 must be text, not dict"),
        ({"exec": {"command": ["true", "a\0b"]}}, "[handlers.exec] command word 2 holds a NUL byte"),
        ({"nats": {"url": "nats://x:4222", "stream": "S"}}, "[handlers.nats] has no setting stream"),
        ({"send_email": {"from": "s@x", "to": "a@x", "host": " "}}, "[handlers.send_email] host is empty"),
        ({"webhook": {"url": "http://"}}, "[handlers.webhook] url names no host; write http://HOST..."),
        ({"webhook": {"url": "https://u:pw@:8443/in"}}, "[handlers.webhook] url names no host"),
        ({"webhook": {"url": "http://hooks:99999/"}}, "[handlers.webhook] url has a port that is not a number"),
        ({"webhook": {"url": "http://hooks:0/"}}, "[handlers.webhook] url has a port that is not a number"),
        ({"nats": {"url": ["nats://a:4222", "nats://b:http"]}}, "[handlers.nats] url has a port that is not"),
        ({"nats": {"url": "tls://:4222"}}, "[handlers.nats] url names no host; write nats://HOST..."),
    ],
)
def test_builtin_settings_are_checked_at_start_up(config: dict[str, Any], fragment: str) -> None:
    """Before any event arrives: a missing url must not become ten retries per event."""
    with pytest.raises(SubsError) as error:
        load_handlers(config=config)
    assert fragment in str(error.value)


def test_a_log_path_this_user_cannot_write_is_refused_at_start_up(tmp_path: Path) -> None:
    """A folder, or a file on a read-only file system (a mount: root may
    write any file mode), failed every attempt before."""
    (tmp_path / "rw").mkdir()
    (tmp_path / "rw" / "events.jsonl").write_text("")
    with pytest.raises(SubsError, match=rf"path {tmp_path}/rw is a folder; name a file in it$"):
        load_handlers(config={"log": {"path": str(tmp_path / "rw")}})
    with read_only_mount(tmp_path / "rw", tmp_path / "ro") as mounted:
        for name in ("events.jsonl", "new.jsonl"):
            with pytest.raises(SubsError, match=rf"path {mounted}/{name}: this user may not write there"):
                load_handlers(config={"log": {"path": str(mounted / name)}})


def test_a_bad_environment_value_of_exec_is_not_shown() -> None:
    """An env value is often a token: its error names the variable only."""
    with pytest.raises(SubsError) as error:
        load_handlers(config={"exec": {"command": "/bin/true", "env": {"TOKEN": "s3cret\0"}}})
    assert "TOKEN" in str(error.value) and "s3cret" not in str(error.value)


@pytest.mark.parametrize("module", [exec_plugin, log_plugin, nats_relay, send_email, webhook])
def test_each_builtin_reads_the_settings_its_docstring_names(module: ModuleType) -> None:
    """The settings a built-in accepts (``SETTINGS``: any other is refused at
    start-up) are the ones its docstring documents."""
    documented: set[str] = set()
    in_settings = False
    for line in (module.__doc__ or "").splitlines():
        if line.startswith("Settings ("):
            in_settings = True
        elif in_settings and line.startswith("``"):
            documented.update(re.findall(r"``(\w+)``", line))
        elif in_settings and line and not line.startswith(" "):
            break
    assert documented == set(module.SETTINGS)


PLUGIN = """
from subscriptions import hookimpl

@hookimpl
def register_handlers(register, config):
    def note(event):
        with open(config[event.tag]["path"], "a") as file:
            file.write(f"{event.tag} {event.id} {event.cursor}\\n")
    register("note", note)
    register("tx_note", note, transactional=True)
"""


def test_deliver_runs_a_plugin_from_a_file(tmp_path: Path) -> None:
    plugin = tmp_path / "note_plugin.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "notes.txt"
    handlers = load_handlers(plugins=[str(plugin)], config={"note": {"path": str(out)}, "tx_note": {"path": str(out)}})
    assert handlers["note"].plugin == str(plugin) and handlers["tx_note"].transactional
    event = make_event("note", id=5)
    deliver(handlers["note"], event, cursor="CURSOR")
    deliver(handlers["tx_note"], make_event("tx_note", id=6))
    deliver(handlers["tx_note"], make_event("tx_note", id=7), cursor="CURSOR")
    assert out.read_text().splitlines() == ["note 5 None", "tx_note 6 None", "tx_note 7 CURSOR"]
    assert event.cursor is None
