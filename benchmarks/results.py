"""Measured figures and their summaries (median, min, max over repeats)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Sample:
    """One figure from one repeat of one case."""

    workload: str
    engine: str
    case: str
    metric: str
    unit: str
    value: float
    repeat: int = 0


@dataclass(frozen=True)
class Summary:
    workload: str
    engine: str
    case: str
    metric: str
    unit: str
    median: float
    min: float
    max: float
    values: tuple[float, ...] = field(default=())

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.workload, self.engine, self.case, self.metric)

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["values"] = list(self.values)
        data["n"] = len(self.values)
        return data


def summarize(samples: Iterable[Sample]) -> list[Summary]:
    """One summary per (workload, engine, case, metric), in first-seen order."""
    groups: dict[tuple[str, str, str, str], list[Sample]] = {}
    for sample in samples:
        groups.setdefault((sample.workload, sample.engine, sample.case, sample.metric), []).append(sample)
    summaries = []
    for (workload, engine, case, metric), group in groups.items():
        values = tuple(s.value for s in group)
        summaries.append(
            Summary(
                workload,
                engine,
                case,
                metric,
                group[0].unit,
                statistics.median(values),
                min(values),
                max(values),
                values,
            )
        )
    return summaries


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class Recorder:
    """Collects the samples and notes of a run."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.notes: list[dict[str, str]] = []

    def add(self, workload: str, engine: str, case: str, metric: str, unit: str, value: float, repeat: int = 0) -> None:
        self.samples.append(Sample(workload, engine, case, metric, unit, float(value), repeat))

    def note(self, workload: str, engine: str, text: str) -> None:
        """A fact a reader needs next to the figures (a capped run, a method)."""
        entry = {"workload": workload, "engine": engine, "text": text}
        if entry not in self.notes:
            self.notes.append(entry)
