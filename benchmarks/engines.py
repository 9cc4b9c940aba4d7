"""Where the benchmark databases live: files opened by the embedded Firebird 5
engine, or files served by Debian's Firebird 3 server on 127.0.0.1:3050
(started with tests/fb3server.py, shared with the test suite: never stopped here)."""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
from pathlib import Path
from types import ModuleType

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

from . import REPO_ROOT

ENGINE_NAMES = ("fb5", "fb3")
# Variables of the user's shell that would point subs elsewhere.
_SUBS_ENV = ("SUBS_DATABASE", "SUBS_PLUGINS", "SUBS_CONFIG", "ISC_USER", "ISC_PASSWORD")


def test_helper(name: str) -> ModuleType:
    """A server helper of the tests (fb3server, natsserver), loaded by path."""
    path = REPO_ROOT / "tests" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class Engine:
    """Creates fresh databases and says how subprocesses reach them."""

    name: str
    title: str
    skip_locked: bool

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self.directory = self._make_directory()

    def _make_directory(self) -> Path:
        raise NotImplementedError

    def _settings(self, path: Path) -> ConnectionSettings:
        raise NotImplementedError

    def new_database(self, label: str) -> ConnectionSettings:
        path = self.directory / f"{label}-{next(self._numbers)}.fdb"
        settings = self._settings(path)
        Database(settings, create=True).close()
        return settings

    def drop(self, settings: ConnectionSettings) -> None:
        path = Path(settings.dsn.split(":3050/", 1)[-1])
        path.unlink(missing_ok=True)

    def env(self, settings: ConnectionSettings) -> dict[str, str]:
        """Environment for a ``subs`` subprocess: credentials never in argv."""
        env = {key: value for key, value in os.environ.items() if key not in _SUBS_ENV}
        env["ISC_USER"] = settings.effective_user
        if settings.password:
            env["ISC_PASSWORD"] = settings.password
        return env

    def cleanup(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class Embedded(Engine):
    name, title, skip_locked = "fb5", "embedded Firebird 5", True

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        super().__init__()

    def _make_directory(self) -> Path:
        path = self.workdir / "fb5"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _settings(self, path: Path) -> ConnectionSettings:
        return ConnectionSettings(str(path))


class Fb3Server(Engine):
    name, title, skip_locked = "fb3", "Firebird 3 server", False

    def _make_directory(self) -> Path:
        self.server = test_helper("fb3server")
        self.server.start()  # a no-op when it already runs
        return self.server.database_dir()

    def _settings(self, path: Path) -> ConnectionSettings:
        return ConnectionSettings(f"inet://127.0.0.1:3050/{path}", "SYSDBA", self.server.password())


def open_engines(names: list[str], workdir: Path) -> list[Engine]:
    return [Embedded(workdir) if name == "fb5" else Fb3Server() for name in names]
