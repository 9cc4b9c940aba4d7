"""The results as a text table (terminal), Markdown (README) and JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .results import Summary


def number(value: float, unit: str) -> str:
    if unit in ("ev/s", "rows/s", "events", "count", "lines"):
        return f"{value:,.0f}"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:+.1f} %"
    if unit in ("ms", "s", "MB"):
        return f"{value:,.2f} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    return f"{value:g} {unit}"


def _rows(summaries: Sequence[Summary]) -> list[list[str]]:
    rows = []
    for s in summaries:
        spread = "" if s.min == s.max else f"{number(s.min, s.unit)} - {number(s.max, s.unit)}"
        rows.append([s.workload, s.engine, s.case, s.metric, number(s.median, s.unit), spread, str(len(s.values))])
    return rows


_HEADER = ["workload", "engine", "case", "metric", "median", "min - max", "n"]
_GOAL_HEADER = ["workload", "engine", "goal", "measured", "verdict"]


def _measured(verdict: dict) -> str:
    shown = number(verdict["value"], verdict["unit"])
    return shown if verdict["stat"] == "median" else f"{shown} ({verdict['stat']})"


def _goal_rows(verdicts: Sequence[dict]) -> list[list[str]]:
    return [[v["workload"], v["engine"], v["goal"], _measured(v), "PASS" if v["passed"] else "FAIL"] for v in verdicts]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    previous = None
    for row in rows:
        if previous is not None and row[:2] != previous:
            lines.append("")
        previous = row[:2]
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _load_line(data: dict) -> str:
    load = data.get("load_average_1min_per_workload") or {}
    return (
        "1-minute load average before/after each workload (2 cores; other work on the machine shows here): "
        + ", ".join(f"{key} {before:.1f}/{after:.1f}" for key, (before, after) in load.items())
    )


def render_text(data: dict) -> str:
    summaries = [Summary(**{k: v for k, v in s.items() if k != "n"}) for s in data["results"]]
    parts = [f"{name}: {text}" for name, text in data["workloads"].items()] + [
        "",
        text_table(_HEADER, _rows(summaries)),
        "",
        "Goals",
        text_table(_GOAL_HEADER, _goal_rows(data["goals"])),
    ]
    if data["notes"]:
        parts += ["", "Notes"] + [f"- {n['workload']} {n['engine']}: {n['text']}" for n in data["notes"]]
    return "\n".join(parts + ["", _load_line(data)])


def render_markdown(data: dict) -> str:
    summaries = [Summary(**{k: v for k, v in s.items() if k != "n"}) for s in data["results"]]
    parts = [f"- **{name}**: {text}" for name, text in data["workloads"].items()] + [
        "",
        markdown_table(_HEADER, _rows(summaries)),
        "",
        markdown_table(_GOAL_HEADER, _goal_rows(data["goals"])),
    ]
    if data["notes"]:
        parts += [""] + [f"- {n['workload']} {n['engine']}: {n['text']}" for n in data["notes"]]
    return "\n".join(parts + ["", _load_line(data)]) + "\n"


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
