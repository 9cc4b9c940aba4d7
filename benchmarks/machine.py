"""What the figures were measured on: CPU, memory, disk, Firebird versions,
ServerMode and forced writes of each engine."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

from subscriptions.db import runtime
from subscriptions.db.connection import Database

from . import REPO_ROOT
from .engines import Engine

FB3_CONFIG = Path("/etc/firebird/3.0/firebird.conf")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    match = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
    return round(int(match.group(1)) / 2**20, 1) if match else 0.0


def _disk(path: Path) -> dict[str, object]:
    """The mount holding ``path``: device, file system, size, what the kernel says about rotation."""
    best = ("", "", "")
    for line in Path("/proc/mounts").read_text().splitlines():
        device, mount, fstype = line.split()[:3]
        if str(path.resolve()).startswith(mount) and len(mount) > len(best[1]):
            best = (device, mount, fstype)
    device, mount, fstype = best
    rotational = Path(f"/sys/block/{Path(device).name}/queue/rotational")
    usage = shutil.disk_usage(path)
    return {
        "device": device,
        "mount": mount,
        "filesystem": fstype,
        "size_gib": round(usage.total / 2**30),
        "free_gib": round(usage.free / 2**30),
        "rotational (as the kernel reports it)": rotational.read_text().strip() if rotational.exists() else "?",
    }


def server_mode(engine: Engine) -> str:
    """The ServerMode the engine runs with, from the firebird.conf it reads."""
    config = runtime.runtime_root() / "firebird.conf" if engine.name == "fb5" else FB3_CONFIG
    match = re.search(r"^\s*ServerMode\s*=\s*(\w+)", config.read_text(), re.MULTILINE)
    return match.group(1) if match else "Super (the default)"


def _engine(engine: Engine) -> dict[str, object]:
    settings = engine.new_database("probe")
    try:
        with Database(settings) as db, db.transaction() as cursor:
            cursor.execute("SELECT MON$FORCED_WRITES, MON$PAGE_SIZE FROM MON$DATABASE")
            forced_writes, page_size = cursor.fetchone()
            version = ".".join(map(str, db.engine_version))
    finally:
        engine.drop(settings)
    return {
        "title": engine.title,
        "version": version,
        "server_mode": server_mode(engine),
        "forced_writes": bool(forced_writes),
        "page_size": page_size,
        "database_dir": str(engine.directory),
    }


def revision() -> str:
    """The subs commit measured (``-dirty``: with uncommitted changes to tracked files)."""
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def describe(engines: list[Engine], workdir: Path) -> dict[str, object]:
    return {
        "subs_revision": revision(),
        "load_average_at_start": os.getloadavg(),
        "cpus": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": _memory_gib(),
        "disk": _disk(workdir),
        "os": platform.platform(),
        "python": platform.python_version(),
        "firebird-driver": metadata.version("firebird-driver"),
        "firebird-embedded": metadata.version("firebird-embedded"),
        "engines": {engine.name: _engine(engine) for engine in engines},
    }
