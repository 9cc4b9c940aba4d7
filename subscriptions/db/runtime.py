"""Loads the Firebird client library: the embedded engine from the
``firebird-embedded`` wheel (5.x by default; 4.x works too), set up so that
several processes can share one database file.

This is the only module that knows how the wheel is laid out. Everything here
must happen before the driver attaches to anything, and only once per process.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import shutil
import tempfile
import threading
from pathlib import Path

from firebird.driver import DatabaseError, core, fbapi
from firebird.embedded.provider import FirebirdProvider

from subscriptions.errors import SubsError

from .errors import is_connection_lost

# ServerMode=Super (the wheel's default) locks the database file to one
# process; SuperClassic lets the listener, its workers and `subs` commands
# share it, and carries POST_EVENT between them. SuperClassic's default page
# cache is 256 pages per process; claims walk more than that once the claim
# index has grown (housekeeping.py), and every miss is a read.
FIREBIRD_CONF = """\
# Written by subs. The embedded engine reads its configuration from here.
ServerMode = SuperClassic
DefaultDbCachePages = 2048
"""

# The wheel's files the engine cannot start without.
WHEEL_FILES = ("libfbclient.so.2", "libtomcrypt.so.1", "plugins/libEngine13.so")

_lock = threading.Lock()


class SharedRuntime(FirebirdProvider):
    """The wheel's runtime, seen through a root whose firebird.conf says SuperClassic."""

    def __init__(self, root: Path) -> None:
        self._root = root

    @property
    def root(self) -> Path:
        return self._root

    @property
    def firebird_log(self) -> Path:
        return self._root / "firebird.log"


def runtime_base() -> Path:
    """Where our runtime lives: per user and per engine version. It holds
    ``runtime/`` (the root the engine is loaded from) and ``lib/``."""
    base = os.environ.get("SUBS_RUNTIME_DIR")
    if base:
        return Path(base)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "subs" / f"firebird-{FirebirdProvider().package_version}"


def runtime_root() -> Path:
    return runtime_base() / "runtime"


def _build_root(wheel_root: Path, root: Path, major: int) -> None:
    """Create ``root`` atomically: links to the wheel's files plus our
    firebird.conf; bring the firebird.conf of an existing root up to date
    and mend its links into a wheel that was removed.

    Firebird 4 refuses a plugin whose real path is not the one it asked for,
    so its plugins and character sets are copied (hard links where
    possible), not linked."""
    conf = root / "firebird.conf"
    if conf.is_file():
        if conf.read_text() != FIREBIRD_CONF:
            _write_atomically(conf, FIREBIRD_CONF)
        _relink_dangling(wheel_root, root)
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root.parent))
    try:
        for entry in wheel_root.iterdir():
            if entry.name in ("firebird.conf", "firebird.log"):
                continue
            if major < 5 and entry.name in ("plugins", "intl"):
                shutil.copytree(entry, staging / entry.name, copy_function=_link_or_copy)
            else:
                (staging / entry.name).symlink_to(entry)
        (staging / "firebird.conf").write_text(FIREBIRD_CONF)
        try:
            staging.rename(root)
        except OSError:
            if not conf.is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _relink_dangling(wheel_root: Path, root: Path) -> None:
    """Point the root's links that lead nowhere at this wheel's files. The
    root is shared by every environment with this engine version, and the
    one that built it may be gone (a virtualenv made anew, a CI checkout
    removed): the engine could no longer be loaded from any of them."""
    for link in root.iterdir():
        target = wheel_root / link.name
        if link.is_symlink() and not link.exists() and target.exists():
            temporary = root / f".{link.name}-{os.getpid()}"
            temporary.unlink(missing_ok=True)
            temporary.symlink_to(target)
            os.replace(temporary, link)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _write_atomically(path: Path, text: str) -> None:
    """Other processes may be reading ``path``: they see the old or the new text."""
    handle, temporary = tempfile.mkstemp(prefix=".firebird.conf-", dir=path.parent)
    with os.fdopen(handle, "w") as file:
        file.write(text)
    os.replace(temporary, path)


def _check_wheel(wheel: FirebirdProvider) -> None:
    """A wheel with files missing (an install cut short, files deleted by
    hand) would fail deep in the driver or the engine with a traceback."""
    missing = [name for name in WHEEL_FILES if not (wheel.root / name).is_file()]
    if missing:
        version = wheel.package_version
        raise SubsError(
            f"the firebird-embedded {version} wheel is incomplete ({', '.join(missing)} missing in {wheel.root}): "
            f"reinstall it with `pip install --force-reinstall firebird-embedded=={version}`"
        )


def _preload_crypto_libraries(wheel_root: Path, major: int) -> None:
    """The engine needs libtommath (Debian's libtommath1) and the wheel's
    libtomcrypt, which its RPATH ($ORIGIN/../lib) cannot find: load both
    globally first. Firebird 4 asks for libtommath.so.0 by name: a link of
    that name in our lib/, which that RPATH finds from our root, points to
    the system's libtommath.so.1 (the same library under its newer name)."""
    tommath = ctypes.util.find_library("tommath") or "libtommath.so.1"
    try:
        ctypes.CDLL(tommath, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise SubsError(
            "the embedded Firebird engine needs libtommath: install it with `apt-get install libtommath1`"
        ) from exc
    if major < 5:
        _link_tommath_0(runtime_base() / "lib", tommath)
    ctypes.CDLL(str(wheel_root / "libtomcrypt.so.1"), mode=ctypes.RTLD_GLOBAL)


def _link_tommath_0(lib: Path, loaded: str) -> None:
    link = lib / "libtommath.so.0"
    if link.exists():
        return
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if loaded in line}
    if not paths:
        raise SubsError(f"cannot find the file of {loaded}; install libtommath1")
    lib.mkdir(parents=True, exist_ok=True)
    temporary = lib / f".libtommath.so.0-{os.getpid()}"
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(paths.pop())
    os.replace(temporary, link)


def _shut_down_at_exit() -> None:
    """The driver's own exit hook, quiet when the engine is already shut
    down: the client library's handler of SIGINT and SIGTERM shuts it down
    itself, and a command stopped so at its attach then ended with a
    traceback ("Exception ignored in atexit callback ... Engine is
    shutdown") under its one-line message."""
    try:
        core._api_shutdown()
    except DatabaseError as exc:
        if not is_connection_lost(exc):
            raise


def shut_down(within: float) -> bool:
    """Shut the engine down, waiting at most ``within`` seconds for it: False
    when it has not ended by then. A thread waiting inside the engine holds
    its shutdown up for as long as it waits, and the engine's own exit hooks
    too: for a lock of a process stopped or killed at the wrong moment
    (docs/OPERATIONS.md, "The embedded engine"), for ever. The process must
    then end without them (``os._exit``)."""
    if not fbapi.has_api():
        return True
    ended = threading.Event()

    def shut() -> None:
        try:
            _shut_down_at_exit()
        finally:
            ended.set()

    threading.Thread(target=shut, name="engine shutdown", daemon=True).start()
    if not ended.wait(within):
        return False
    atexit.unregister(_shut_down_at_exit)  # shut down: the exit has nothing left to do
    return True


def load() -> None:
    """Load the client library once per process (idempotent, thread-safe)."""
    with _lock:
        if fbapi.has_api():
            if not isinstance(fbapi.api.provider, SharedRuntime):
                # Something built driver objects first and the driver picked
                # a system client library (e.g. Debian's Firebird 3).
                raise RuntimeError("firebird-driver was initialised before subscriptions.runtime.load()")
            return
        wheel = FirebirdProvider()
        _check_wheel(wheel)
        major = int(wheel.firebird_version.split(".")[0])
        root = runtime_root()
        _build_root(wheel.root, root, major)
        _preload_crypto_libraries(wheel.root, major)
        # The driver only sets FIREBIRD when it is unset or differs; a caller's
        # FIREBIRD pointing elsewhere would bring back ServerMode=Super.
        os.environ["FIREBIRD"] = str(root)
        fbapi.load_api(SharedRuntime(root))
        atexit.unregister(core._api_shutdown)
        atexit.register(_shut_down_at_exit)
