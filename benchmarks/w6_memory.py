"""W6: listener memory over a long drain: resident set size of the listener
(supervisor and workers together) sampled while it handles many events."""

from __future__ import annotations

import time
from pathlib import Path

from .app import insert_items, subscribed_items
from .config import Context, Sizes
from .engines import Engine
from .listen import SAFETY_LIMIT, Listener

NAME = "W6"
ENGINES = ("fb5",)
CASE = "listener (all processes)"
SAMPLE_EVERY = 0.1
WARM_UP = 0.2  # of the handling time


def title(sizes: Sizes) -> str:
    return f"memory, one `subs listen --drain --batch {sizes.w6_batch}` over {sizes.w6_events:,} events (single run)"


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(root: int) -> list[int]:
    """``root`` and its descendants."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def run(ctx: Context, engine: Engine) -> None:
    rec, sizes = ctx.recorder, ctx.sizes
    ctx.progress(f"{NAME} {engine.name}: {sizes.w6_events:,} events, sampling RSS")
    settings = subscribed_items(engine, "w6")
    samples: list[tuple[int, float, float]] = []  # (monotonic ns, total MB, largest process MB)
    try:
        insert_items(settings, sizes.w6_events)
        with Listener(engine, settings, ctx.workdir, "--drain", "--batch", str(sizes.w6_batch)) as listener:
            deadline = time.monotonic() + SAFETY_LIMIT
            while listener.process.poll() is None and time.monotonic() < deadline:
                sizes_kib = [_rss_kib(pid) for pid in _tree(listener.pid)]
                samples.append((time.monotonic_ns(), sum(sizes_kib) / 1024, max(sizes_kib) / 1024))
                time.sleep(SAMPLE_EVERY)
            outcome = listener.finish(0.0)  # exited by now, or stopped here at SAFETY_LIMIT
            left = listener.check_drained(settings, rec, NAME, engine.name)
    finally:
        engine.drop(settings)
    first = min(h.started for h in outcome.handled)
    last = max(h.finished for h in outcome.handled)
    warm = first + WARM_UP * (last - first)
    running = [s for s in samples if first <= s[0] <= last]
    if len(running) < 3:
        raise RuntimeError(f"only {len(running)} RSS samples while handling; make the run longer")
    after_warm_up = [s for s in running if s[0] >= warm]
    for index, label in ((1, CASE), (2, "largest process (the worker)")):
        warmed = after_warm_up[0][index]
        rec.add(NAME, engine.name, label, "start", "MB", running[0][index])
        rec.add(NAME, engine.name, label, "after warm-up", "MB", warmed)
        rec.add(NAME, engine.name, label, "peak", "MB", max(s[index] for s in running))
        rec.add(NAME, engine.name, label, "end", "MB", running[-1][index])
        rec.add(
            NAME,
            engine.name,
            label,
            "growth after warm-up",
            "%",
            100 * (max(s[index] for s in after_warm_up) - warmed) / warmed,
        )
    rec.add(NAME, engine.name, CASE, "handled", "events", len(outcome.handled))
    rec.add(NAME, engine.name, CASE, "left in the log after --drain exited", "events", left)
    rec.add(NAME, engine.name, CASE, "events/s", "ev/s", len(outcome.handled) / outcome.span)
    rec.note(
        NAME,
        engine.name,
        f"RSS summed over the listener's processes every {SAMPLE_EVERY} s while "
        f"handlers ran; warm-up: the first {WARM_UP:.0%} of the handling time; growth: highest sample "
        "after warm-up over the sample when warm-up ended; one run (not repeated)",
    )
