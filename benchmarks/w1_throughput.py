"""W1: throughput with a no-op handler: a queue of events drained by subs
(ordered and parallel, with and without --batch) and by baselines 1 and 2."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import baselines
from .app import execute, insert_items, subscribed_items
from .config import Context, Sizes, deadline
from .engines import Engine
from .listen import Listener

NAME = "W1"
ENGINES = ("fb5", "fb3")
ORDERED = "subs ordered"
PARALLEL = "subs parallel"
BASELINE_1 = "baseline 1: polling"
BASELINE_2 = "baseline 2: 5 procs, RAND() lock"
SAME_BATCH = "x subs ordered, same batch"


def title(sizes: Sizes) -> str:
    return f"throughput, no-op handler, {sizes.w1_events:,} events queued"


@dataclass(frozen=True)
class CaseResult:
    handled: int
    span: float
    wall: float
    capped: bool
    conflicts: int
    warnings: int = 0
    duplicates: int = 0

    @property
    def rate(self) -> float:
        return self.handled / self.span if self.span else 0.0


def drain_with_subs(ctx: Context, engine: Engine, events: int, *listen_args: str) -> CaseResult:
    """Fresh database, ``events`` events in one transaction, ``subs listen --drain``."""
    settings = subscribed_items(engine, "subs")
    try:
        insert_items(settings, events)
        with Listener(engine, settings, ctx.workdir, "--drain", *listen_args) as listener:
            outcome = listener.finish(ctx.time_limit)
            if not outcome.capped:
                listener.check_drained(settings, ctx.recorder, NAME, engine.name)
        for line in dict.fromkeys(_strip_time(line) for line in outcome.problems):
            ctx.recorder.note(NAME, engine.name, f"subs listen {' '.join(listen_args)} logged: {line}")
        return CaseResult(
            len(outcome.handled),
            outcome.span,
            outcome.wall,
            outcome.capped,
            outcome.conflicts,
            len(outcome.problems),
            outcome.duplicates,
        )
    finally:
        engine.drop(settings)


def _strip_time(line: str) -> str:
    """A log line without its timestamp, so repeats of one problem are noted once."""
    return line.split(" ", 2)[-1] if line[:4].isdigit() else line


def _baseline(ctx: Context, engine: Engine, events: int, which: Callable[..., baselines.Result]) -> CaseResult:
    settings = engine.new_database("naive")
    try:
        execute(settings, "items_table")
        sub_id = baselines.naive_schema(settings)
        insert_items(settings, events)
        result = which(settings, sub_id, deadline(ctx.time_limit))
        return CaseResult(result.processed, result.span, result.wall, result.processed < events, result.conflicts)
    finally:
        engine.drop(settings)


def parallel_name(ctx: Context) -> str:
    return f"{PARALLEL} ({ctx.sizes.workers} workers)"


def batched(ctx: Context, case: str) -> str:
    return f"{case} --batch {ctx.sizes.w1_batch}"


def cases(ctx: Context) -> dict[str, Callable[[Engine], CaseResult]]:
    n, batch = ctx.sizes.w1_events, ("--batch", str(ctx.sizes.w1_batch))
    parallel = ("--mode", "parallel", "--workers", str(ctx.sizes.workers))
    return {
        ORDERED: lambda engine: drain_with_subs(ctx, engine, n),
        batched(ctx, ORDERED): lambda engine: drain_with_subs(ctx, engine, n, *batch),
        parallel_name(ctx): lambda engine: drain_with_subs(ctx, engine, n, *parallel),
        batched(ctx, parallel_name(ctx)): lambda engine: drain_with_subs(ctx, engine, n, *parallel, *batch),
        BASELINE_1: lambda engine: _baseline(ctx, engine, n, baselines.polling),
        BASELINE_2: lambda engine: _baseline(ctx, engine, n, baselines.random_lock),
    }


def run(ctx: Context, engine: Engine) -> None:
    rec, n = ctx.recorder, ctx.sizes.w1_events
    for repeat in range(1, ctx.repeat + 1):
        rates: dict[str, float] = {}
        for case, measure in cases(ctx).items():
            ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {case}")
            result = measure(engine)
            rates[case] = result.rate
            rec.add(NAME, engine.name, case, "events/s", "ev/s", result.rate, repeat)
            rec.add(NAME, engine.name, case, "events/s incl. start-up", "ev/s", result.handled / result.wall, repeat)
            rec.add(NAME, engine.name, case, "handled", "events", result.handled, repeat)
            rec.add(NAME, engine.name, case, "conflicts", "count", result.conflicts, repeat)
            if case.startswith("subs"):
                rec.add(NAME, engine.name, case, "listener warnings", "lines", result.warnings, repeat)
                rec.add(NAME, engine.name, case, "duplicate deliveries", "count", result.duplicates, repeat)
            if result.capped:
                rec.note(
                    NAME,
                    engine.name,
                    f"{case}: stopped at the {ctx.time_limit:g} s time limit; its rate "
                    f"is over the events handled by then (of {n:,} queued)",
                )
        for case, rate in rates.items():
            if case.startswith("subs"):
                rec.add(NAME, engine.name, case, "x baseline 1", "x", rate / rates[BASELINE_1], repeat)
        for parallel, ordered in (
            (parallel_name(ctx), ORDERED),
            (batched(ctx, parallel_name(ctx)), batched(ctx, ORDERED)),
        ):
            rec.add(NAME, engine.name, parallel, SAME_BATCH, "x", rates[parallel] / rates[ordered], repeat)
        rec.add(NAME, engine.name, BASELINE_2, "x baseline 1", "x", rates[BASELINE_2] / rates[BASELINE_1], repeat)
    rec.note(
        NAME,
        engine.name,
        "events/s: handled events over the span from the first handler start to the "
        "last handler finish (baselines: first row taken to last row deleted); 'incl. start-up' divides "
        "by the wall time of the whole command, process start-up included",
    )
