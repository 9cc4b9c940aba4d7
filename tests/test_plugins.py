"""Plugin discovery (entry points, paths, SUBS_PLUGINS), duplicate tags, the
README's plugin example run verbatim, and the demo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from subscriptions.cli import cli
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

from conftest import Subs, assert_one_line_error, execute, query

README = Path(__file__).parent.parent / "README.md"
PLUGIN = """
from subscriptions import hookimpl

@hookimpl
def register_handlers(register):
    register("{tag}", lambda event: None)
"""


def run_subs(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "subscriptions", *args],
        env={**os.environ, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_plugins_from_entry_points_paths_and_env(tmp_path):
    (tmp_path / "ep_plugin.py").write_text(PLUGIN.format(tag="from_entry_point"))
    dist = tmp_path / "ep_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[subscriptions]\nep = ep_plugin\n")
    (tmp_path / "by_path.py").write_text(PLUGIN.format(tag="from_path"))
    (tmp_path / "by_env.py").write_text(PLUGIN.format(tag="from_env"))
    result = run_subs(
        "handlers",
        "--json",
        "--plugin",
        str(tmp_path / "by_path.py"),
        env={"PYTHONPATH": str(tmp_path), "SUBS_PLUGINS": str(tmp_path / "by_env.py")},
    )
    assert result.returncode == 0, result.stderr
    found = {row["tag"]: row["plugin"] for row in json.loads(result.stdout)}
    assert found["from_entry_point"] == "ep"
    assert found["from_path"].endswith("by_path.py") and found["from_env"].endswith("by_env.py")
    again = run_subs(
        "handlers",
        "--json",
        "--plugin",
        "ep_plugin",
        "--plugin",
        "subscriptions.builtin.log",
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert again.returncode == 0, again.stderr
    assert {row["tag"]: row["plugin"] for row in json.loads(again.stdout)} == {"from_entry_point": "ep"}


def test_without_handlers_the_list_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["handlers"], env={"SUBS_PLUGINS": ""})
    assert result.exit_code == 0
    assert result.stdout.startswith("no handlers: a built-in one (exec, log, nats, send_email, webhook)")
    (tmp_path / "subs.toml").write_text("[handlers.log]\n")
    assert CliRunner().invoke(cli, ["handlers"], env={"SUBS_PLUGINS": ""}).stdout.splitlines()[1].split()[:2] == [
        "log",
        "builtin:log",
    ]


def test_a_handlers_table_no_loaded_handler_reads_is_named(tmp_path, monkeypatch):
    """A misspelt [handlers.webhok] was ignored in silence, its events
    pending for ever; a plugin's table is named too when the plugin is not
    loaded, and not when it is."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "subs.toml").write_text('[handlers.webhok]\nurl = "http://127.0.0.1:9/"\n[handlers.mine]\n')
    (tmp_path / "mine.py").write_text(PLUGIN.format(tag="mine"))
    note = (
        "note: [handlers.{}] is read by no handler loaded here: a misspelt tag, or a plugin's table and that "
        "plugin was not loaded (--plugin, SUBS_PLUGINS)\n"
    )
    result = CliRunner().invoke(cli, ["handlers"], env={"SUBS_PLUGINS": ""})
    assert (result.exit_code, result.stderr) == (0, note.format("mine") + note.format("webhok"))
    result = CliRunner().invoke(cli, ["handlers", "--plugin", "mine.py"], env={"SUBS_PLUGINS": ""})
    assert (result.exit_code, result.stderr) == (0, note.format("webhok"))
    assert result.stdout.splitlines()[1].split()[0] == "mine"


def test_one_plugin_file_named_twice_is_loaded_once(tmp_path, monkeypatch):
    """--plugin p.py with SUBS_PLUGINS=/abs/p.py (or ./p.py) is one plugin,
    not two registering the same tags."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "once.py").write_text(PLUGIN.format(tag="once"))
    (tmp_path / "link.py").symlink_to(tmp_path / "once.py")
    given = ["--plugin", "once.py", "--plugin", "./once.py", "--plugin", "link.py"]
    result = CliRunner().invoke(cli, ["handlers", "--json", *given], env={"SUBS_PLUGINS": str(tmp_path / "once.py")})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"tag": "once", "plugin": "once.py", "transactional": False, "batch": False}]


def test_duplicate_tags_name_both_plugins(tmp_path):
    for name in ("one", "two"):
        (tmp_path / f"{name}.py").write_text(PLUGIN.format(tag="same"))
    plugins = ["--plugin", str(tmp_path / "one.py"), "--plugin", str(tmp_path / "two.py")]
    result = CliRunner().invoke(cli, ["handlers", *plugins])
    assert_one_line_error(result, "'same' is registered by both", "one.py", "two.py")


def test_bad_plugins_are_one_line_errors(tmp_path):
    (tmp_path / "broken.py").write_text("import no_such_module_anywhere\n")
    result = CliRunner().invoke(cli, ["handlers", "--plugin", str(tmp_path / "missing.py")])
    assert_one_line_error(result, "missing.py: no such file")
    result = CliRunner().invoke(cli, ["handlers", "--plugin", str(tmp_path / "broken.py")])
    assert_one_line_error(result, "failed to import", "no_such_module_anywhere")
    assert_one_line_error(CliRunner().invoke(cli, ["handlers", "--plugin", "no.such.module"]), "no such module")
    (tmp_path / "raises.py").write_text(
        PLUGIN.replace('register("{tag}", lambda event: None)', "raise KeyError('smtp')")
    )
    result = CliRunner().invoke(cli, ["handlers", "--plugin", str(tmp_path / "raises.py")])
    assert_one_line_error(result, "raises.py failed to register its handlers: KeyError: 'smtp'")
    (tmp_path / "not_callable.py").write_text(PLUGIN.format(tag="x").replace("lambda event: None", "'send'"))
    result = CliRunner().invoke(cli, ["handlers", "--plugin", str(tmp_path / "not_callable.py")])
    assert_one_line_error(result, "not_callable.py registers 'x' with 'send', which is not a function to call")
    (tmp_path / "misnamed.py").write_text(
        "from subscriptions import hookimpl\n\n@hookimpl\ndef register_handlers(reg):\n    reg('x', print)\n"
    )
    result = CliRunner().invoke(cli, ["handlers", "--plugin", str(tmp_path / "misnamed.py")])
    assert_one_line_error(result, "misnamed.py does not fit subs's hooks", "{'reg'}")
    (tmp_path / "misspelt.py").write_text(
        "from subscriptions import hookimpl\n\n@hookimpl\ndef register_handler(register):\n    register('x', print)\n"
    )
    result = CliRunner().invoke(cli, ["handlers", "--plugin", str(tmp_path / "misspelt.py")])
    assert_one_line_error(
        result,
        "misspelt.py implements register_handler, which is not a subs hook (listener_startup, register_handlers)",
    )
    (tmp_path / "mistyped.py").write_text(PLUGIN.format(tag="x").replace("None)", "None, transactionl=True)"))
    result = CliRunner().invoke(cli, ["handlers", "--plugin", str(tmp_path / "mistyped.py")])
    assert_one_line_error(
        result,
        "mistyped.py failed to register its handlers: "
        "TypeError: register() got an unexpected keyword argument 'transactionl'",
    )


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_readme_plugin_example_verbatim(settings, tmp_path, mode):
    """The README's promise: `subs add languages I send_email` plus the one-file
    plugin handles every inserted row exactly once, in both modes."""
    example = re.search(r"This file, `my_plugin.py`,\nis complete:\n\n```python\n(.*?)```", README.read_text(), re.S)
    (tmp_path / "my_plugin.py").write_text(example.group(1))
    execute(
        settings,
        "CREATE TABLE LANGUAGES (LANGUAGE_ID INTEGER GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
        "NAME VARCHAR(20), YEAR_RELEASED INTEGER)",
    )
    Subs(settings).ok("add", "languages", "I", "send_email")
    for name in ("Dylan", "Lisp", "Io", "Nim", "Zig"):
        execute(settings, f"INSERT INTO LANGUAGES (NAME, YEAR_RELEASED) VALUES ('{name}', 1992)")
    result = run_subs(
        "-d",
        settings.dsn,
        "listen",
        "--plugin",
        "./my_plugin.py",
        "--drain",
        "--mode",
        mode,
        cwd=tmp_path,
        env={"ISC_USER": settings.effective_user, "ISC_PASSWORD": settings.password or ""},
    )
    assert result.returncode == 0, result.stderr
    emails = [line for line in result.stdout.splitlines() if line.startswith("would email about LANGUAGES I")]
    assert sorted(emails) == sorted(set(emails)) and len(emails) == 5, result.stdout
    assert "would email about LANGUAGES I {'LANGUAGE_ID': 1}" in result.stdout
    assert query(settings, "SELECT COUNT(*) FROM EVENT_LOG") == [(0,)]


def test_demo_shows_events_handled(tmp_path):
    result = run_subs("demo", "--path", str(tmp_path / "demo.fdb"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "send_email: would email about new language Lisp" in result.stdout
    assert "EVENT_LOG now holds 0 event(s)" in result.stdout
    again = run_subs("demo", "--path", str(tmp_path / "demo.fdb"), cwd=tmp_path)
    assert again.returncode == 0 and "EVENT_LOG now holds 0 event(s)" in again.stdout, again.stderr


def test_demo_deletes_no_file_but_its_own(tmp_path):
    """--path app.fdb deleted the application's database: only a database an
    earlier demo made is made again."""
    application = tmp_path / "app.fdb"
    with Database(ConnectionSettings(str(application)), create=True) as db, db.transaction() as cursor:
        cursor.execute("CREATE TABLE LANGUAGES (ID INTEGER)")
    (tmp_path / "notes.txt").write_text("not a database")
    for path in (application, tmp_path / "notes.txt", tmp_path):
        inode = path.stat().st_ino
        result = run_subs("demo", "--path", str(path), cwd=tmp_path)
        assert (result.returncode, result.stdout) == (1, ""), result.stderr
        assert result.stderr == (
            f"Error: {path} exists and is not a database the demo made, which it would delete: choose another "
            "--path (or delete the file yourself)\n"
        )
        assert path.stat().st_ino == inode
    assert query(ConnectionSettings(str(application)), "SELECT COUNT(*) FROM LANGUAGES") == [(0,)]
    assert (tmp_path / "notes.txt").read_text() == "not a database"
