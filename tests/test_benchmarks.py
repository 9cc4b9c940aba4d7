"""Smoke test of the benchmark harness (benchmarks/): runs it at --quick sizes
and checks that every workload produced sane figures. No timing thresholds:
the figures depend on the machine; the goals are reported, not asserted."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALL = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9", "W10", "W11", "W12", "W13", "W14")


def run_quick(tmp_path: Path, *args: str) -> dict:
    output = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(output), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Goals" in result.stdout
    return json.loads(output.read_text())


def figures(data: dict, workload: str, engine: str) -> dict[tuple[str, str], dict]:
    return {(r["case"], r["metric"]): r for r in data["results"] if r["workload"] == workload and r["engine"] == engine}


# Besides percentages (W6's memory growth), W11's extra time per column may be
# negative: a difference of two timings, which noise made -0.55 us for
# VARCHAR(40) in a quick run in CI.
SIGNED = {"capture per column"}


def check_sane(data: dict, workloads: tuple[str, ...], engine: str) -> None:
    assert data["failures"] == []
    for workload in workloads:
        found = figures(data, workload, engine)
        assert found, f"no figures for {workload} on {engine}"
        for (case, metric), row in found.items():
            for value in (row["median"], row["min"], row["max"], *row["values"]):
                assert math.isfinite(value), (workload, case, metric, value)
                if row["unit"] != "%" and metric not in SIGNED:
                    assert value >= 0, (workload, case, metric, value)
            assert row["n"] == len(row["values"]) >= 1
    verdicts = [g for g in data["goals"] if g["engine"] == engine]
    assert {g["workload"] for g in verdicts} == set(workloads)
    assert all(isinstance(g["passed"], bool) for g in verdicts)


def test_quick_run_on_embedded_firebird_covers_every_workload(tmp_path):
    data = run_quick(tmp_path, "--engine", "fb5")
    check_sane(data, ALL, "fb5")
    sizes = data["sizes"]
    w1 = figures(data, "W1", "fb5")
    handled = {case: row["median"] for (case, metric), row in w1.items() if metric == "handled"}
    assert len(handled) == 6 and set(handled.values()) == {sizes["w1_events"]}, handled
    rates = [row["median"] for (case, metric), row in w1.items() if metric == "events/s"]
    assert len(rates) == 6 and all(rate > 0 for rate in rates)
    assert {case for case, _ in figures(data, "W2", "fb5")} >= {
        "subs parallel (4 workers)",
        "baseline 3: SKIP LOCKED queue, 4 procs",
    }
    w3 = figures(data, "W3", "fb5")
    assert w3[("idle listener", "handled")]["median"] == sizes["w3_events"]
    assert w3[("idle listener", "p50")]["median"] <= w3[("idle listener", "max")]["median"]
    assert figures(data, "W5", "fb5")[("subs ordered", "x fresh")]["median"] > 0
    assert figures(data, "W6", "fb5")[("listener (all processes)", "peak")]["median"] > 0
    assert figures(data, "W7", "fb5")[("nats relay, ordered", "x no-op")]["median"] > 0
    assert figures(data, "W8", "fb5")[("subs backfill --batch 1000", "rows/s")]["median"] > 0
    assert figures(data, "W9", "fb5")[("overview page", "x small log")]["median"] > 0
    w10 = figures(data, "W10", "fb5")
    assert w10[("1 ms handler, parallel (4 processes)", "x ordered")]["median"] > 0
    assert w10[("handler process killed", "s to start again")]["median"] > 0
    w11 = figures(data, "W11", "fb5")
    assert w11[("DOUBLE PRECISION", "first insert of an attachment")]["median"] > 0
    assert w11[("DOUBLE PRECISION, plain table", "first insert of an attachment")]["median"] > 0
    w12 = figures(data, "W12", "fb5")
    spread = {case: row for (case, metric), row in w12.items() if metric == "x one subscription"}
    assert len(spread) == 4 and all(row["median"] > 0 for row in spread.values())
    assert "parallel (4 processes), 10 tables, logged table by table" in spread
    assert data["machine"]["engines"]["fb5"]["server_mode"] == "SuperClassic"


def test_quick_run_on_the_firebird_3_server(tmp_path):
    data = run_quick(tmp_path, "--engine", "fb3", "--only", "W1,W2,W4,W11")
    check_sane(data, ("W1", "W2", "W4", "W11"), "fb3")
    w4 = figures(data, "W4", "fb3")
    assert w4[("1 subscription", "x plain, bulk insert (PSQL)")]["median"] > 0
    assert not any(case.startswith("baseline 3") for case, _ in figures(data, "W2", "fb3"))
    assert data["machine"]["engines"]["fb3"]["version"].startswith("3.")


def test_a_tree_that_would_measure_another_trees_subs_is_refused(tmp_path):
    """A copy of the harness outside this tree imports subs through the
    .venv's editable install of this one: its figures would be this tree's,
    so it refuses to run, in one line, before any database is made."""
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("results"))
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "W4", "--engine", "fb5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: this run would measure subs from {ROOT / 'subscriptions'}, not {tmp_path}: "
        f"run ./dev.sh test tests/test_layout.py in {tmp_path} to give it a .venv of its own\n"
    )
