"""The embedded engine's runtime root: SuperClassic and a page cache sized
for the claim walk, also in a root written by an older release."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from firebird.embedded.provider import FirebirdProvider

from subscriptions.db import runtime

from conftest import EMBEDDED

# The Firebird 4 wheel, kept apart and put first on the path (dev.sh).
FB4_WHEEL = Path(__file__).resolve().parents[1] / ".engines" / "fb4"


def test_an_older_roots_firebird_conf_is_brought_up_to_date(tmp_path):
    wheel = tmp_path / "wheel"
    wheel.mkdir()
    (wheel / "libfbclient.so.2").write_text("")
    root = tmp_path / "root"
    runtime._build_root(wheel, root, 5)
    assert (root / "firebird.conf").read_text() == runtime.FIREBIRD_CONF
    assert (root / "libfbclient.so.2").is_symlink()
    (root / "firebird.conf").write_text("ServerMode = SuperClassic\n")
    runtime._build_root(wheel, root, 5)
    assert (root / "firebird.conf").read_text() == runtime.FIREBIRD_CONF


def test_a_firebird_4_root_has_real_plugin_and_charset_files(tmp_path):
    """Firebird 4 refuses a plugin whose real path is not the one it asked for."""
    wheel = tmp_path / "wheel"
    for directory in ("plugins", "intl"):
        (wheel / directory).mkdir(parents=True)
        (wheel / directory / "lib.so").write_text("x")
    root = tmp_path / "root"
    runtime._build_root(wheel, root, 4)
    for directory in ("plugins", "intl"):
        assert not (root / directory).is_symlink() and not (root / directory / "lib.so").is_symlink()
        assert (root / directory / "lib.so").read_text() == "x"


def test_links_into_a_removed_wheel_are_pointed_at_this_one(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for wheel in (first, second):
        wheel.mkdir()
        (wheel / "libfbclient.so.2").write_text(wheel.name)
    root = tmp_path / "root"
    runtime._build_root(first, root, 5)
    shutil.rmtree(first)
    runtime._build_root(second, root, 5)
    assert (root / "libfbclient.so.2").read_text() == "second"


@pytest.mark.parametrize("engine", ["fb5"], indirect=True)
def test_subs_runs_when_the_environment_that_built_the_runtime_root_is_gone(settings, tmp_path):
    """The root is per user and engine version, shared by every virtualenv
    with that wheel; the one that built it may have been deleted since."""
    base = tmp_path / "runtime-base"
    (base / "runtime").mkdir(parents=True)
    (base / "runtime" / "firebird.conf").write_text(runtime.FIREBIRD_CONF)
    for entry in FirebirdProvider().root.iterdir():
        if entry.name not in ("firebird.conf", "firebird.log"):
            (base / "runtime" / entry.name).symlink_to(tmp_path / "deleted-venv" / entry.name)
    env = {**os.environ, "SUBS_RUNTIME_DIR": str(base)}
    status = subprocess.run(
        [sys.executable, "-m", "subscriptions", "-d", settings.dsn, "status"], env=env, capture_output=True, text=True
    )
    assert status.returncode == 0, status.stderr
    assert (base / "runtime" / "libfbclient.so.2").resolve() == (FirebirdProvider().root / "libfbclient.so.2").resolve()


# Runs `python -m subscriptions` with the wheel's files taken from $FAKE_WHEEL.
WITH_FAKE_WHEEL = """
import os, runpy
from pathlib import Path
from firebird.embedded.provider import FirebirdProvider
FirebirdProvider.root = property(lambda self: Path(os.environ["FAKE_WHEEL"]))
runpy.run_module("subscriptions", run_name="__main__")
"""


@pytest.mark.parametrize("missing", runtime.WHEEL_FILES)
def test_a_wheel_with_a_file_missing_is_a_one_line_error_naming_it_and_the_fix(tmp_path, missing):
    """Found with a wheel whose client library was gone: a traceback from
    inside the driver ("Firebird client library not found")."""
    wheel = tmp_path / "wheel"
    for entry in FirebirdProvider().root.rglob("*"):
        copy = wheel / entry.relative_to(FirebirdProvider().root)
        if entry.is_dir():
            copy.mkdir(parents=True, exist_ok=True)
        elif entry.relative_to(FirebirdProvider().root) != Path(missing):
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.symlink_to(entry)
    env = {**os.environ, "SUBS_RUNTIME_DIR": str(tmp_path / "runtime-base"), "FAKE_WHEEL": str(wheel)}
    status = subprocess.run(
        [sys.executable, "-c", WITH_FAKE_WHEEL, "-d", str(tmp_path / "app.fdb"), "init"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert status.returncode == 1
    assert not (tmp_path / "app.fdb").exists()
    version = FirebirdProvider().package_version
    assert status.stderr == (
        f"Error: the firebird-embedded {version} wheel is incomplete ({missing} missing in {wheel}): "
        f"reinstall it with `pip install --force-reinstall firebird-embedded=={version}`\n"
    )


@pytest.mark.parametrize("engine", ["fb5"], indirect=True)
def test_the_embedded_engine_runs_with_our_configuration(db):
    assert db.fetch_value("SELECT MON$PAGE_BUFFERS FROM MON$DATABASE") == 2048
    assert db.fetch_value("SELECT RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION') FROM RDB$DATABASE").startswith("5.")
    assert (
        db.fetch_value("SELECT RDB$CONFIG_VALUE FROM RDB$CONFIG WHERE RDB$CONFIG_NAME = 'ServerMode'") == "SuperClassic"
    )


@pytest.mark.parametrize("engine", [EMBEDDED], indirect=True)
def test_a_database_open_in_another_firebird_version_is_a_one_line_error_with_the_way_out(db, settings):
    """Found in the Firebird 4 pass of the tests, when a subprocess loaded
    Firebird 5: the engine's bare "lock manager error; inconsistent lock
    table type/version". An application on embedded 4.0 and subs on the
    default 5.0 meet it the same way. Here this process holds the file with
    one engine and `subs status` runs on the other."""
    assert (FB4_WHEEL / "firebird").is_dir(), f"the Firebird 4 wheel is missing in {FB4_WHEEL}: run ./dev.sh test"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if EMBEDDED == "fb5":
        env["PYTHONPATH"] = str(FB4_WHEEL)
    status = subprocess.run(
        [sys.executable, "-m", "subscriptions", "-d", settings.dsn, "status"], env=env, capture_output=True, text=True
    )
    assert (status.returncode, status.stdout) == (1, "")
    assert status.stderr == (
        f"Error: cannot connect to {settings.dsn}: another program has it open with a Firebird engine of "
        "another version, and engines of different versions cannot share a database file; "
        "give subs that program's engine version (pip install firebird-embedded==X.Y), "
        "or let every program reach the file through one Firebird server (host:/path)\n"
    )
