"""The embedded engine's runtime root: SuperClassic and a page cache sized
for the claim walk, also in a root written by an older release."""

from __future__ import annotations

import pytest

from subscriptions.db import runtime


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


@pytest.mark.parametrize("engine", ["fb5"], indirect=True)
def test_the_embedded_engine_runs_with_our_configuration(db):
    assert db.fetch_value("SELECT MON$PAGE_BUFFERS FROM MON$DATABASE") == 2048
    assert db.fetch_value("SELECT RDB$GET_CONTEXT('SYSTEM', 'ENGINE_VERSION') FROM RDB$DATABASE").startswith("5.")
    assert (
        db.fetch_value("SELECT RDB$CONFIG_VALUE FROM RDB$CONFIG WHERE RDB$CONFIG_NAME = 'ServerMode'") == "SuperClassic"
    )
