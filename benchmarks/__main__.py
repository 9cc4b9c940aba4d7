"""``python -m benchmarks``: fresh databases, every workload side by side with
its baselines, medians over repeats, a table on stdout and the same as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import (
    PACKAGE_DIR,
    PYTHON,
    REPO_ROOT,
    goals,
    machine,
    report,
    w1_throughput,
    w2_slow_handlers,
    w3_latency,
    w4_trigger_cost,
    w5_history,
    w6_memory,
    w7_relay,
    w8_backfill,
    w9_console,
    w10_handler_pool,
    w11_wide_tables,
    w12_many_subscriptions,
    w13_blob_rows,
    w14_open_transaction,
)
from .config import FULL, QUICK, Context
from .engines import ENGINE_NAMES, open_engines
from .results import Recorder, summarize

WORKLOADS = {
    m.NAME: m
    for m in (
        w1_throughput,
        w2_slow_handlers,
        w3_latency,
        w4_trigger_cost,
        w5_history,
        w6_memory,
        w7_relay,
        w8_backfill,
        w9_console,
        w10_handler_pool,
        w11_wide_tables,
        w12_many_subscriptions,
        w13_blob_rows,
        w14_open_transaction,
    )
}
DEFAULT_JSON = PACKAGE_DIR / "results" / "latest.json"
# A --quick run says nothing about performance: it must not replace the
# recorded figures of a full run that the README cites (git ignores it).
QUICK_JSON = PACKAGE_DIR / "results" / "quick.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (the smoke test)")
    parser.add_argument("--repeat", type=int, help="runs per case [default: 3, with --quick 1]")
    parser.add_argument(
        "--engine",
        choices=[*ENGINE_NAMES, "both"],
        default="both",
        help="embedded Firebird 5, the Firebird 3 server, or both [default: both]",
    )
    parser.add_argument("--only", help="comma-separated workloads, e.g. W1,W3 [default: all]")
    parser.add_argument(
        "--time-limit",
        type=float,
        help="seconds after which one W1 case run is stopped and its rate taken over what it "
        "handled; 0 for none [default: 10, with --quick 30]",
    )
    parser.add_argument(
        "--json", type=Path, help=f"where the figures go [default: {DEFAULT_JSON}, with --quick {QUICK_JSON}]"
    )
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    args = parser.parse_args(argv)
    only = [name.strip().upper() for name in (args.only or ",".join(WORKLOADS)).split(",") if name.strip()]
    unknown = [name for name in only if name not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    args.only = only
    args.json = args.json or (QUICK_JSON if args.quick else DEFAULT_JSON)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def code_from_elsewhere() -> str | None:
    """Where subs comes from, for this process and for the listeners it
    starts, when that is not this tree: a clone or worktree that shares
    another's .venv imports that one's editable install (its subs, plugins/
    and sql/), so an A/B run would time the same code twice."""
    modules = ("subscriptions", "subscriptions.sql", "subscriptions.builtin")
    probe = "import importlib, sys\nfor name in sys.argv[1:]: print(importlib.import_module(name).__file__)"
    # From a directory of no tree, as the listeners start.
    found = subprocess.run(
        [PYTHON, "-c", probe, *modules], cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True
    ).stdout.split()
    found.append(sys.modules["subscriptions"].__file__ or "")
    elsewhere = [path for path in found if not Path(path).resolve().is_relative_to(REPO_ROOT)]
    return str(Path(elsewhere[0]).parent) if elsewhere else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    elsewhere = code_from_elsewhere()
    if elsewhere:
        print(
            f"error: this run would measure subs from {elsewhere}, not {REPO_ROOT}: "
            f"run ./dev.sh test tests/test_layout.py in {REPO_ROOT} to give it a .venv of its own",
            file=sys.stderr,
        )
        return 2
    sizes = QUICK if args.quick else FULL
    limit = args.time_limit if args.time_limit is not None else (30.0 if args.quick else 10.0)
    workdir = Path(tempfile.mkdtemp(prefix="subs-bench-"))
    ctx = Context(sizes, args.repeat or (1 if args.quick else 3), limit or None, workdir, Recorder())
    engines = open_engines(list(ENGINE_NAMES) if args.engine == "both" else [args.engine], workdir)
    began, started_at = time.monotonic(), dt.datetime.now().astimezone()
    failures = []
    load: dict[str, tuple[float, float]] = {}  # the machine is shared: what else ran shows here
    try:
        described = machine.describe(engines, workdir)
        for name in args.only:
            module = WORKLOADS[name]
            for engine in engines:
                if engine.name not in module.ENGINES:
                    continue
                before = os.getloadavg()[0]
                try:
                    module.run(ctx, engine)
                except Exception:
                    failures.append(f"{name} {engine.name}")
                    ctx.recorder.note(name, engine.name, "FAILED: " + traceback.format_exc(limit=3).strip())
                    traceback.print_exc()
                load[f"{name} {engine.name}"] = (before, os.getloadavg()[0])
    finally:
        for engine in engines:
            engine.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    summaries = summarize(ctx.recorder.samples)
    data = {
        "command": "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": started_at.isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - began, 1),
        "load_average_1min_per_workload": load,
        "repeat": ctx.repeat,
        "time_limit_s": ctx.time_limit,
        "sizes": dataclasses.asdict(sizes),
        "machine": described,
        "workloads": {name: WORKLOADS[name].title(sizes) for name in args.only},
        "results": [s.as_dict() for s in summaries],
        "goals": goals.evaluate(sizes, summaries),
        "notes": ctx.recorder.notes,
        "samples": [dataclasses.asdict(s) for s in ctx.recorder.samples],
        "failures": failures,
    }
    report.write_json(args.json, data)
    if args.markdown:
        args.markdown.write_text(report.render_markdown(data))
    print(report.render_text(data))
    print(f"\n{len(summaries)} figures in {data['duration_s']:.0f} s; JSON: {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
