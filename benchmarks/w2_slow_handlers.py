"""W2: slow handlers (a random 10-40 ms sleep each) on 4 workers: how close the
span from the first handler start to the last finish comes to the ideal,
the sum of the sleeps divided by the workers; subs parallel vs baseline 3."""

from __future__ import annotations

from . import baselines
from .app import insert_sleepy_items, random_sleeps, subscribed_items
from .config import Context, Sizes, deadline
from .engines import Engine
from .listen import SAFETY_LIMIT, Listener

NAME = "W2"
ENGINES = ("fb5", "fb3")
BASELINE_3 = f"baseline 3: SKIP LOCKED queue, {baselines.B3_PROCESSES} procs"


def title(sizes: Sizes) -> str:
    low, high = sizes.w2_sleep_ms
    return f"slow handlers, {sizes.w2_events:,} events of {low}-{high} ms, {sizes.workers} workers"


def run(ctx: Context, engine: Engine) -> None:
    rec, sizes = ctx.recorder, ctx.sizes
    subs_case = f"subs parallel ({sizes.workers} workers)"
    for repeat in range(1, ctx.repeat + 1):
        sleeps = random_sleeps(sizes.w2_events, sizes.w2_sleep_ms, seed=repeat)
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {subs_case}")
        settings = subscribed_items(engine, "w2")
        try:
            insert_sleepy_items(settings, sleeps)
            args = ("--drain", "--mode", "parallel", "--workers", str(sizes.workers))
            with Listener(engine, settings, ctx.workdir, *args) as listener:
                outcome = listener.finish()
                listener.check_drained(settings, rec, NAME, engine.name)
        finally:
            engine.drop(settings)
        ideal = sum(sleeps[h.key - 1] for h in outcome.handled) / 1000 / sizes.workers
        _record(ctx, engine, subs_case, repeat, outcome.span, ideal, outcome.wall, len(outcome.handled), outcome.capped)
        rec.add(NAME, engine.name, subs_case, "conflicts", "count", outcome.conflicts, repeat)
        rec.add(NAME, engine.name, subs_case, "worker start stagger", "s", outcome.stagger, repeat)
        if not engine.skip_locked:
            rec.note(NAME, engine.name, "baseline 3 needs SKIP LOCKED (Firebird 5): not run")
            continue
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {BASELINE_3}")
        settings = engine.new_database("queue")
        try:
            baselines.queue_schema(settings, sleeps)
            result = baselines.skip_locked(settings, deadline(SAFETY_LIMIT))
        finally:
            engine.drop(settings)
        ideal = sum(sleep_ms for _, _, sleep_ms in result.tasks) / 1000 / sizes.workers
        _record(
            ctx,
            engine,
            BASELINE_3,
            repeat,
            result.span,
            ideal,
            result.wall,
            result.processed,
            result.processed < len(sleeps),
        )
        rec.add(NAME, engine.name, BASELINE_3, "conflicts", "count", result.conflicts, repeat)
        rec.add(NAME, engine.name, BASELINE_3, "worker start stagger", "s", result.stagger, repeat)
    rec.note(
        NAME,
        engine.name,
        "span: first handler (task) start to last finish; ideal: sum of the sleeps "
        f"of the handled events / {sizes.workers}; the same seeded sleeps for both in a repeat; worker start "
        "stagger: from the first worker's first handler (task) start to the last worker's, part of the span",
    )


def _record(
    ctx: Context,
    engine: Engine,
    case: str,
    repeat: int,
    span: float,
    ideal: float,
    wall: float,
    handled: int,
    capped: bool,
) -> None:
    rec = ctx.recorder
    rec.add(NAME, engine.name, case, "span", "s", span, repeat)
    rec.add(NAME, engine.name, case, "ideal", "s", ideal, repeat)
    rec.add(NAME, engine.name, case, "x ideal", "x", span / ideal if ideal else 0.0, repeat)
    rec.add(NAME, engine.name, case, "wall incl. start-up", "s", wall, repeat)
    rec.add(NAME, engine.name, case, "handled", "events", handled, repeat)
    if capped:
        rec.note(NAME, engine.name, f"{case}: stopped at the {SAFETY_LIMIT:g} s safety limit")
