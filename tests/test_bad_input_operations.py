"""Bad input to the operating commands (listen, queue, daemon control) and to
the configuration: one line on stderr, non-zero exit, no traceback, database
unchanged. The subscription commands' cases are in test_bad_input.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
from subscriptions.schema import upgrade as schema

from conftest import Subs, assert_one_line_error, execute, query, read_only_mount, state

USAGE = 2  # click's exit code for a bad option value or a missing argument

CASES = {
    "no workers": (["listen", "--workers", "0"], "Invalid value for '--workers'", USAGE),
    "negative lease": (["listen", "--lease", "-5"], "Invalid value for '--lease'", USAGE),
    "zero batch": (["listen", "--batch", "0"], "Invalid value for '--batch'", USAGE),
    # Past these bounds the claimer crash-looped (lease, batch) or the listener
    # started processes without end (workers).
    "lease past a day": (["listen", "--lease", "1e300"], "Invalid value for '--lease'", USAGE),
    "batch past its bound": (["listen", "--batch", "99999999999999999999"], "number from 1 to 10000", USAGE),
    "workers past their bound": (["listen", "--workers", "99999999999"], "Invalid value for '--workers'", USAGE),
    "attempts past their bound": (
        ["listen", "--max-attempts", "1" + "0" * 20],
        "Invalid value for '--max-attempts'",
        USAGE,
    ),
    "backoff past a day": (["listen", "--backoff-max", "1e300"], "Invalid value for '--backoff-max'", USAGE),
    "status watching past a day": (["status", "--watch", "1e300"], "Invalid value for '--watch'", USAGE),
    "batch neither auto nor a number": (["listen", "--batch", "many"], "'many' is neither 'auto'", USAGE),
    "zero poll": (["listen", "--poll", "0"], "Invalid value for '--poll'", USAGE),
    # A handler process takes about 27 MiB before its first job: it would be replaced after every job.
    "handler memory limit below a fresh process": (
        ["listen", "--handler-memory-limit", "10"],
        "Invalid value for '--handler-memory-limit': 10 is not in the range x>=64",
        USAGE,
    ),
    "unknown mode": (["listen", "--mode", "sideways"], "Invalid value for '--mode'", USAGE),
    "key order in ordered mode": (["listen", "--key-order"], "--key-order needs --mode parallel", USAGE),
    "detach without pidfile": (["listen", "--detach"], "--detach needs --pidfile and --logfile", USAGE),
    "logfile in no folder": (["listen", "--logfile", "/no/such/folder/subs.log"], "cannot open logfile /no/such", 1),
    "logfile not to append to": (["listen", "--logfile", "/proc/version"], "cannot open logfile /proc/version", 1),
    "drain patience without drain": (
        ["listen", "--drain-patience", "5"],
        "--drain-patience applies to --drain only",
        USAGE,
    ),
    "negative drain patience": (["listen", "--drain", "--drain-patience", "-1"], "'--drain-patience'", USAGE),
    "pidfile without detach": (
        ["listen", "--pidfile", "{tmp}/subs.pid"],
        "--pidfile is written only with --detach",
        USAGE,
    ),
    "backoff minimum above maximum": (
        ["listen", "--backoff-min", "5", "--backoff-max", "1"],
        "--backoff-min (5) is more than --backoff-max (1)",
        USAGE,
    ),
    "metrics port out of range": (["listen", "--metrics-port", "70000"], "'--metrics-port'", USAGE),
    "poll of NaN seconds": (["listen", "--poll", "nan"], "'nan' is not a number of seconds", USAGE),
    "grace of NaN seconds": (["listen", "--drain", "--grace", "NaN"], "'NaN' is not a number of seconds", USAGE),
    "watch every NaN seconds": (["status", "--watch", "nan"], "'nan' is not a number of seconds", USAGE),
    "a table named in bytes that are not UTF-8": (
        ["add", "items\udce9", "I", "rec"],
        "argument 'items\\udce9' holds bytes that are not UTF-8 text",
        USAGE,
    ),
    "a condition in bytes that are not UTF-8": (
        ["add", "items", "U", "rec", "--when", "NEW.NOTE = '\udce9'"],
        "holds bytes that are not UTF-8 text",
        USAGE,
    ),
    "plugin path missing": (["listen", "--plugin", "/nonexistent/plugin.py"], "no such file", 1),
    "plugin module missing": (["listen", "--plugin", "no.such.module"], "no such module", 1),
    "plugin failing to import": (["listen", "--plugin", "{tmp}/broken.py"], "failed to import", 1),
    "plugin raising at import": (["listen", "--plugin", "{tmp}/raising.py"], "plugin says no", 1),
    "tag without handler": (["listen", "--tag", "nobody"], "no handler for tag(s) nobody", 1),
    "empty tag": (["listen", "--tag", ""], "tag '' is not valid", 1),
    "tag carrying SQL": (["retry", "--tag", "x';DELETE FROM EVENT_LOG;--"], "is not valid", 1),
    "retry unknown id": (["retry", "424242"], "no dead event with id 424242", 1),
    "retry not a number": (["retry", "one"], "'one' is not a valid integer", USAGE),
    "retry id beyond a BIGINT": (["retry", "9223372036854775808"], "not in the range 1<=x<=9223372036854775807", USAGE),
    "retry of nothing": (["retry"], "say which dead events to retry", 1),
    "grant to a role that does not exist": (
        ["grant", "--to-role", "nobody"],
        "there is no role NOBODY in this database: create it first (CREATE ROLE), then grant it to the users",
        1,
    ),
    "retry of a tag no subscription has": (["retry", "--tag", "nobody"], "no subscription has tag 'nobody'", 1),
    "retry by ids and a tag": (["retry", "1", "--tag", "rec"], "give one of event ids, --tag TAG or --all, not", 1),
    "purge with a bad age": (["purge", "--older-than", "soon"], "soon", 1),
    "purge with an age past any timestamp": (["purge", "--older-than", "999999999d"], "more than 36500d", 1),
    "purge with an age past a BIGINT": (["purge", "--older-than", "99999999999999999999d"], "more than 36500d", 1),
    "purge without age": (["purge"], "Missing option '--older-than'", USAGE),
    "status watching every 0s": (["status", "--watch", "0"], "Invalid value for '--watch'", USAGE),
    "lag limit without check": (["status", "--max-lag", "60"], "--max-lag is a limit for --check; add --check", USAGE),
    "lag limit of 0s": (["status", "--check", "--max-lag", "0"], "Invalid value for '--max-lag'", USAGE),
    "check while watching": (["status", "--check", "--watch", "2"], "--check looks once, for monitoring", USAGE),
    "unknown command": (["frobnicate"], "No such command 'frobnicate'", USAGE),
    "stop without pidfile": (["stop", "--pidfile", "{tmp}/none.pid"], "no pidfile at", 1),
    "stop with a stale pidfile": (["stop", "--pidfile", "{tmp}/stale.pid"], "which is not running", 1),
    "malformed config": (["--config", "{tmp}/malformed.toml", "list"], "is not valid TOML", 1),
    "missing config": (["--config", "{tmp}/absent.toml", "list"], "does not exist", 1),
    "config with unknown section": (["--config", "{tmp}/sections.toml", "list"], "unknown section(s) server", 1),
    "config dsn not a string": (["--config", "{tmp}/dsn.toml", "list"], "[database] dsn must be a string", 1),
    "config with a misspelt key": (["--config", "{tmp}/key.toml", "list"], "unknown [database] key(s) pasword", 1),
    "webhook without url": (["--config", "{tmp}/webhook.toml", "listen"], "url", 1),
    "webhook with a short secret": (["--config", "{tmp}/secret.toml", "listen"], "secret holds 9 bytes; use 24", 1),
    "a misspelt handler setting": (["--config", "{tmp}/timout.toml", "listen"], "has no setting timout", 1),
}

FILES = {
    "broken.py": "import no_such_module_anywhere\n",
    "raising.py": "raise RuntimeError('plugin says no')\n",
    "malformed.toml": "[handlers.log\npath = 1\n",
    "sections.toml": "[server]\nport = 1\n",
    "dsn.toml": "[database]\ndsn = 5\n",
    "key.toml": "[database]\npasword = 'x'\n",
    "webhook.toml": "[handlers.webhook]\ntimeout = 3\n",
    "secret.toml": '[handlers.webhook]\nurl = "http://127.0.0.1:9/"\nsecret = "whsec_c2hvcnRvbmUh"\n',
    "timout.toml": '[handlers.webhook]\nurl = "http://127.0.0.1:9/"\ntimout = 3\n',
}


@pytest.fixture
def prepared(settings: ConnectionSettings, tmp_path: Path) -> ConnectionSettings:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o600)  # a secret in a file others can read would add a note
    # A pid that is certainly not running: a child that has exited and been reaped.
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "stale.pid").write_text(finished.stdout)
    execute(settings, "CREATE TABLE ITEMS (ID INTEGER NOT NULL PRIMARY KEY)")
    Subs(settings).ok("add", "items", "I", "rec")
    execute(settings, "INSERT INTO ITEMS VALUES (1)")
    return settings


@pytest.mark.parametrize("case", CASES)
def test_refused_and_nothing_changes(prepared, tmp_path, case):
    args, fragment, exit_code = CASES[case]
    before = state(prepared)
    result = Subs(prepared)(*(arg.format(tmp=tmp_path) for arg in args))
    assert_one_line_error(result, fragment, exit_code=exit_code)
    assert state(prepared) == before


@pytest.mark.parametrize("variable", ["SUBS_DATABASE", "ISC_USER", "ISC_PASSWORD", "SUBS_WEB_TOKEN", "SUBS__LOG__PATH"])
def test_an_environment_variable_that_is_not_utf8_is_named_not_shown(prepared, variable):
    """Its value never shows (ISC_PASSWORD is a password): only its name."""
    before = state(prepared)
    result = Subs(prepared)("list", env={variable: "s3cr\udce9t"})
    line = assert_one_line_error(
        result, f"environment variable {variable} holds bytes that are not UTF-8 text; set it in UTF-8", exit_code=2
    )
    assert "s3cr" not in line
    assert state(prepared) == before


def test_init_on_a_read_only_file(tmp_path):
    writable, mounted = tmp_path / "rw", tmp_path / "ro"
    writable.mkdir()
    with Database(ConnectionSettings(str(writable / "app.fdb")), create=True):
        pass
    with read_only_mount(writable, mounted):
        result = Subs(ConnectionSettings(str(mounted / "app.fdb")))("init")
        assert_one_line_error(result, "no permission for read-write access", str(mounted / "app.fdb"))
    assert query(
        ConnectionSettings(str(writable / "app.fdb")),
        "SELECT COUNT(*) FROM RDB$RELATIONS WHERE RDB$RELATION_NAME = 'EVENT_LOG'",
    ) == [(0,)]


def test_two_inits_at_once(empty_settings):
    """Both succeed (one installs, the other finds it done or upgrades in step) and
    the schema is there once; neither prints a traceback."""
    env = {**os.environ, "ISC_USER": empty_settings.effective_user, "ISC_PASSWORD": empty_settings.password or ""}
    command = [sys.executable, "-m", "subscriptions", "-d", empty_settings.dsn, "init"]
    runs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = [(run.wait(60), *run.communicate()) for run in runs]
    for code, out, err in results:
        assert code == 0 and err == "", results
    assert sorted(out.split(" version")[0] for _, out, _ in results) != ["schema is up to date"] * 2
    assert query(empty_settings, "SELECT EVENT_SCHEMA_VERSION() FROM RDB$DATABASE") == [(schema.LATEST,)]
    Subs(empty_settings).ok("list")
