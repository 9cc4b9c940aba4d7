"""Fixtures: every database test runs on the embedded engine (Firebird 5; 4
when the Firebird 4 wheel comes first on the path, see dev.sh) and on a real
Firebird 3 server started on 127.0.0.1."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from firebird.embedded.provider import FirebirdProvider

from subscriptions.cli import cli
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
from subscriptions.schema import upgrade as schema

import certificates
import fb3server
import hangs
import httppeer

# The embedded engine is named after the firebird-embedded wheel in use.
EMBEDDED = "fb" + FirebirdProvider().firebird_version.split(".")[0]
ENGINES = (EMBEDDED, "fb3")
ITEMS_TABLE = "CREATE TABLE ITEMS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))"
SERVER_LOG_OFFSET = pytest.StashKey[int]()
SERVER_CRASH = pytest.StashKey[str]()
LISTENERS = pytest.StashKey[list]()  # the test's listening.Listener processes
LISTENER_WEDGED = pytest.StashKey[str]()
TEMPLATES = pytest.StashKey[dict[tuple[str, bool], Path]]()  # (engine, with schema): file
# Test processes (pytest-xdist workers, see dev.sh) take turns: every test
# holds TURN_LOCK shared, a test marked `alone` holds it exclusively. A test
# waiting to run alone holds GATE_LOCK, which each test passes on its way in,
# so that a steady stream of shared turns cannot keep it waiting for ever.
TURN_LOCK = Path(tempfile.gettempdir()) / "subs-tests-turn.lock"
GATE_LOCK = Path(tempfile.gettempdir()) / "subs-tests-gate.lock"
LOCKS = "PYTEST_SUBS_LOCKS"  # environment variable: the run's directory of the engine's lock files


def uses_fb3_server(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return "fb3_dir" in getattr(item, "fixturenames", ()) or (
        callspec is not None and callspec.params.get("engine") == "fb3"
    )


class EngineWedged(AssertionError):
    """Raised by a test that finds the engine wedged: after a SIGKILL on
    embedded Firebird, every process of the database, the application's side
    included, waits inside the engine for minutes (tests/SOAK-NOTES.md,
    finding 8); a claim can spin inside it for minutes on end while another
    attachment of its process rebuilds the claim index (docs/FIREBIRD-BUGS.md,
    7). subs cannot end that, so the test runs once more."""


class EngineCrashed(AssertionError):
    """Raised by a test when a process of its own that runs only Python and
    the embedded engine's library (the soak's, which queries the database)
    died of a crash: the engine's fault after a SIGKILL, like a wedge
    (tests/SOAK-NOTES.md, finding 8), so the test runs once more."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that failed because an engine failed under it runs once more:
    the Firebird 3 server crashed (Firebird 3.0.11 can die with "Fatal lock
    manager error: invalid lock id" when DDL on a table commits while other
    attachments write it, FirebirdSQL/firebird#8817, an engine race: seen
    twice in a day of runs, in test_concurrency), the test raised
    EngineWedged or EngineCrashed, or one of its listeners never served and
    waits inside the engine (Listener.post_mortem's wedge, which can meet
    any listener's start). Any other failure fails at once."""
    for item in items:
        item.add_marker(pytest.mark.flaky(reruns=1, condition=partial(engine_failed_under, item)))


def engine_failed_under(item: pytest.Item, error: BaseException | None) -> bool:
    if isinstance(error, (EngineWedged, EngineCrashed)):
        warnings.warn(f"{error}; the test runs again")
        return True
    if LISTENER_WEDGED in item.stash:
        warnings.warn(f"{item.stash[LISTENER_WEDGED]} never served, waiting inside the engine; the test runs again")
        return True
    if SERVER_CRASH not in item.stash:
        return False
    warnings.warn(f"the Firebird 3 server crashed under this test, which runs again: {item.stash[SERVER_CRASH]}")
    fb3server.start()  # the guardian restarts it; wait until it listens
    return True


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "alone: no other test runs meanwhile (the test restarts the Firebird 3 server, "
        "or its time bounds assume a machine not busy with other tests)",
    )
    if not hasattr(config, "workerinput") and "FIREBIRD_LOCK" not in os.environ and LOCKS not in os.environ:
        # The embedded engine's lock and shared-memory files (6 MB per
        # database) outlive a SIGKILLed last process, and many tests kill
        # listeners: in /tmp/firebird they grew to 4.4 GB in a day of runs.
        # The Firebird 3 server keeps its own (fb3server drops FIREBIRD_*).
        locks = tempfile.mkdtemp(prefix="subs-tests-firebird-")
        os.environ[LOCKS] = locks
        config.add_cleanup(partial(shutil.rmtree, locks, ignore_errors=True))
    if LOCKS in os.environ:
        # A directory per test process (pytest-xdist worker), inherited by what
        # it starts: a process left wedged in the engine by a hung test makes
        # every database creation that shares its directory wait 10 s and
        # fail ("Timeout when waiting callback from other process").
        worker = getattr(config, "workerinput", {}).get("workerid", "main")
        os.environ["FIREBIRD_LOCK"] = os.path.join(os.environ[LOCKS], worker)
        os.makedirs(os.environ["FIREBIRD_LOCK"], exist_ok=True)
    hangs.configure(config)


def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """Beside pytest-timeout's own timer (this returns None), which it then sets."""
    hangs.arm(item, settings.timeout)


def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    hangs.disarm()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    hangs.report(config, terminalreporter)


@pytest.fixture(autouse=True)
def turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Wait for this test's turn: beside other tests, or alone when it is
    marked so. Autouse, so set up before the test's own fixtures (its
    databases, listeners) and held until they are torn down."""
    alone = request.node.get_closest_marker("alone") is not None
    with GATE_LOCK.open("a") as gate, TURN_LOCK.open("a") as turn_lock:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turn_lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if LISTENER_WEDGED in item.stash:
        del item.stash[LISTENER_WEDGED]
    if uses_fb3_server(item):
        item.stash[SERVER_LOG_OFFSET] = fb3server.log_size()
        if SERVER_CRASH in item.stash:
            del item.stash[SERVER_CRASH]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    if report.failed and call.when == "call":
        for listener in item.stash.get(LISTENERS, []):
            try:
                shown, wedged = listener.post_mortem()
            except Exception as exc:  # the database shut down or gone: the report must still come
                shown, wedged = f"no post-mortem: {exc!r}", False
            report.sections.append((f"listener {listener.process.pid}", shown))
            if wedged:
                item.stash[LISTENER_WEDGED] = f"listener {listener.process.pid}"
    if report.failed and SERVER_LOG_OFFSET in item.stash:
        crash = fb3server.crash_since(item.stash[SERVER_LOG_OFFSET])
        if crash:
            item.stash[SERVER_CRASH] = crash
            report.sections.append(("Firebird 3 server crashed during this test", crash))
    return report


@pytest.fixture(scope="session")
def fb3_dir() -> Iterator[Path]:
    fb3server.start()
    path = fb3server.database_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


def settings_of(engine: str, path: Path) -> ConnectionSettings:
    """How a test attaches to the database file ``path`` of ``engine``."""
    if engine == EMBEDDED:
        return ConnectionSettings(str(path))
    return ConnectionSettings(f"inet://127.0.0.1:3050/{path}", "SYSDBA", fb3server.password())


def template(request: pytest.FixtureRequest, engine: str, with_schema: bool) -> Path:
    """The database file this test process copies for each test on
    ``engine``, made at its first use as every test's database was made
    before: created, then given the schema by schema.upgrade. Making one
    took 0.3-0.6 s of each of the 1,900 database tests of a run; a copy of
    the closed file takes milliseconds."""
    made = request.config.stash.setdefault(TEMPLATES, {})
    if (engine, with_schema) not in made:
        if engine == EMBEDDED:
            directory = request.getfixturevalue("tmp_path_factory").mktemp("templates")
        else:
            directory = request.getfixturevalue("fb3_dir")
        path = directory / f"template-{'schema' if with_schema else 'empty'}.fdb"
        with Database(settings_of(engine, path), create=True) as db:
            assert db.engine_version[0] == int(engine[2:]), db.engine_version
        if with_schema:
            with Database(settings_of(engine, path)) as db:
                schema.upgrade(db)
        made[engine, with_schema] = path
    return made[engine, with_schema]


def copied_database(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path, with_schema: bool
) -> Iterator[ConnectionSettings]:
    """A new database of the test's own, a copy of the template; on the
    Firebird 3 server, in its directory and owned by its user."""
    source = template(request, engine, with_schema)
    path = tmp_path / "test.fdb" if engine == EMBEDDED else source.with_name(f"{uuid.uuid4().hex}.fdb")
    shutil.copyfile(source, path)
    if engine == "fb3":
        shutil.chown(path, "firebird", "firebird")
    yield settings_of(engine, path)
    if engine == "fb3":
        path.unlink(missing_ok=True)


@pytest.fixture
def empty_settings(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ConnectionSettings]:
    """A new database without the subs schema."""
    yield from copied_database(request, engine, tmp_path, with_schema=False)


def another_database(settings: ConnectionSettings) -> ConnectionSettings:
    """A new empty database beside ``settings``'s, on the same engine (removed
    with the test's directory, or the Firebird 3 server's at the end)."""
    directory, _, _ = settings.dsn.rpartition("/")
    other = ConnectionSettings(f"{directory}/{uuid.uuid4().hex}.fdb", settings.user, settings.password)
    Database(other, create=True).close()
    return other


@pytest.fixture
def settings(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ConnectionSettings]:
    """A new database with the subs schema installed."""
    yield from copied_database(request, engine, tmp_path, with_schema=True)


@pytest.fixture
def make_user(settings: ConnectionSettings, engine: str) -> Iterator[Callable[[str], ConnectionSettings]]:
    """New database users: real ones on the Firebird 3 server (dropped again
    at the end); the embedded engine takes the user name as given."""
    created: list[str] = []

    def make(role: str) -> ConnectionSettings:
        name = f"{role}_{secrets.token_hex(4)}".upper()
        password = secrets.token_hex(8)
        if engine == "fb3":
            execute(settings, f"CREATE USER {name} PASSWORD '{password}'")
            created.append(name)
        return ConnectionSettings(settings.dsn, name, password)

    yield make
    for name in created:
        execute(settings, f"DROP USER {name}")


@pytest.fixture
def db(settings: ConnectionSettings) -> Iterator[Database]:
    with Database(settings) as database:
        yield database


@pytest.fixture
def items(settings: ConnectionSettings) -> ConnectionSettings:
    """A database with table ITEMS subscribed (IUD) by tag ``rec`` of the
    recording plugin in listening.py, and a table AUDIT."""
    execute(settings, ITEMS_TABLE)
    execute(settings, "CREATE TABLE AUDIT (EVENT_ID BIGINT, ITEM_ID INTEGER)")
    Subs(settings).ok("add", "items", "IUD", "rec")
    return settings


@pytest.fixture
def listeners(request: pytest.FixtureRequest) -> Iterator[list]:
    """Listener processes to kill when the test ends; a failed test's report
    shows their logs, and the stacks of those still running."""
    started: list = []  # listening.Listener
    request.node.stash[LISTENERS] = started
    yield started
    for listener in started:
        listener.stop()


def credentials(settings: ConnectionSettings) -> dict[str, str]:
    """The environment that makes `subs` attach as ``settings`` say."""
    found = {"ISC_USER": settings.effective_user, "ISC_PASSWORD": settings.password or ""}
    if settings.role is not None:
        found["SUBS_ROLE"] = settings.role
    return found


class Subs:
    """Runs ``subs`` commands in-process against one database, the password
    passed the way the README recommends (ISC_PASSWORD)."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Result:
        environment = credentials(self.settings)
        environment.update(env or {})
        return CliRunner().invoke(cli, ["-d", self.settings.dsn, *args], env=environment)

    def ok(self, *args: str) -> str:
        result = self(*args)
        assert result.exit_code == 0, result.output + result.stderr
        return result.stdout


@pytest.fixture
def subs(settings: ConnectionSettings) -> Subs:
    return Subs(settings)


def assert_one_line_error(result: Result, *fragments: str, exit_code: int = 1) -> str:
    """The contract for bad input: exit 1 (2 for usage errors), one line on
    stderr, no traceback."""
    assert result.exit_code == exit_code, (result.exit_code, result.output, result.stderr, result.exception)
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert message.startswith("Error: "), message
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in message, message
    return message


def wait_until(condition: Callable[[], object], timeout: float = 30.0, what: str = "the condition") -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def http_peer() -> Iterator[httppeer.HttpPeer]:
    """A real HTTP server for webhooks (tests/httppeer.py says how it answers)."""
    with httppeer.serving() as peer:
        yield peer


@pytest.fixture
def pki(tmp_path: Path) -> certificates.Pki:
    """A private certificate authority and what it issued (tests/certificates.py)."""
    return certificates.make(tmp_path)


@contextlib.contextmanager
def read_only_mount(source: Path, target: Path) -> Iterator[Path]:
    """A read-only view of ``source`` at ``target`` while the ``with`` block
    runs (root ignores file modes, not a read-only mount)."""
    target.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape_metrics(port: int) -> str:
    """What a listener's ``--metrics-port`` serves now ("" while it does not)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


@contextlib.contextmanager
def uncommitted(settings: ConnectionSettings, statement: str, *params: object) -> Iterator[None]:
    """A session's transaction that changed rows and does not end while the
    block runs, rolled back after."""
    holder = Database(settings)
    try:
        holder.connection.begin()
        holder.connection.cursor().execute(statement, params)
        yield
    finally:
        holder.connection.rollback()
        holder.close()


def execute(settings: ConnectionSettings, *statements: str, params: tuple = ()) -> None:
    """Run statements (DDL or DML) in one transaction, as an application would."""
    with Database(settings) as database, database.transaction() as cursor:
        for statement in statements:
            cursor.execute(statement, params or None)


def release_changes_schema_to(settings: ConnectionSettings, version: int) -> None:
    """What `subs init` of a release with schema ``version`` leaves behind
    for a running listener or console to see."""
    execute(settings, f"CREATE OR ALTER FUNCTION EVENT_SCHEMA_VERSION RETURNS INTEGER AS BEGIN RETURN {version}; END")


def query(settings: ConnectionSettings, sql: str, params: tuple = ()) -> list[tuple]:
    with Database(settings) as database, database.transaction() as cursor:
        cursor.execute(sql, params or None)
        return cursor.fetchall()


def queue_index_segments(settings: ConnectionSettings) -> list[str]:
    """The columns of the claim index, in order."""
    return [
        name
        for (name,) in query(
            settings,
            """
        SELECT TRIM(RDB$FIELD_NAME) FROM RDB$INDEX_SEGMENTS
        WHERE RDB$INDEX_NAME = 'IX_EVENT_LOG_QUEUE' ORDER BY RDB$FIELD_POSITION""",
        )
    ]


def state(settings: ConnectionSettings) -> tuple:
    """Everything a subs command may change, to prove that a refused one did not."""
    return (
        query(settings, "SELECT * FROM EVENT_SUBSCRIBER ORDER BY SUB_ID"),
        query(
            settings,
            "SELECT RDB$TRIGGER_NAME, CAST(RDB$TRIGGER_SOURCE AS VARCHAR(8000)) "
            "FROM RDB$TRIGGERS WHERE RDB$SYSTEM_FLAG = 0 ORDER BY 1",
        ),
        query(settings, "SELECT EVENT_ID, SUB_ID FROM EVENT_LOG ORDER BY EVENT_ID"),
        query(settings, "SELECT RDB$RELATION_NAME FROM RDB$RELATIONS ORDER BY 1"),
    )


def events(settings: ConnectionSettings) -> list[dict]:
    """The event log joined with its subscriptions, values decoded."""
    from subscriptions.capture.values import decode
    from subscriptions.db.connection import read_blob

    with Database(settings) as database, database.transaction() as cursor:
        cursor.execute(
            "SELECT l.EVENT_ID, TRIM(TRAILING FROM s.TABLE_NAME), s.ACTION, TRIM(s.TAG), l.PK_ROW, "
            "l.OLD_ROW, l.NEW_ROW FROM EVENT_LOG l "
            "JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID ORDER BY l.EVENT_ID"
        )
        return [
            {
                "id": row[0],
                "table": row[1],
                "action": row[2],
                "tag": row[3],
                "pk": decode(row[4]),
                "old": decode(read_blob(row[5])),
                "new": decode(read_blob(row[6])),
            }
            for row in cursor.fetchall()
        ]
