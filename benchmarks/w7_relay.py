"""W7: relaying to NATS JetStream. The same events drained once through the
no-op benchmark handler and once through the built-in ``nats`` relay to a
real nats-server (tag ``bench_nats`` of the benchmark plugin, which records
each batch's start and finish), in the same run; the rate is over the span
from the first handler start to the last finish. Then the relay handler
alone, in this process: what it costs a handler process per message."""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

from .app import TAG, insert_items, subscribed_items
from .config import Context, Sizes
from .engines import Engine, test_helper
from .listen import Handled, Listener

NAME = "W7"
ENGINES = ("fb5", "fb3")
NOOP = "no-op handler"
RELAY = "nats relay"
ORDERED = "ordered"
PARALLEL = "parallel (4 workers)"
TWO_LISTENERS = "parallel, 2 listeners x 2 workers"
ALONE = "nats relay alone, in process, batches of 100"
ALONE_EVENTS = 20_000
# Case: (listener processes, their options).
MODES = {
    ORDERED: (1, ()),
    PARALLEL: (1, ("--mode", "parallel", "--workers", "4")),
    TWO_LISTENERS: (2, ("--mode", "parallel", "--workers", "2")),
}


def title(sizes: Sizes) -> str:
    return f"relay to NATS JetStream, {sizes.w7_events:,} events, subs ordered and parallel"


def _span(
    ctx: Context, engine: Engine, tag: str, events: int, env: dict[str, str], listeners: int, *mode: str
) -> float:
    """Seconds from the first handler start to the last finish, draining
    ``events`` events of ``tag`` with ``listeners`` listener processes."""
    settings = subscribed_items(engine, "w7", tags=(tag,))
    handled: list[Handled] = []
    try:
        insert_items(settings, events)
        with contextlib.ExitStack() as running:
            started = [
                running.enter_context(Listener(engine, settings, ctx.workdir, "--drain", "--tag", tag, *mode, env=env))
                for _ in range(listeners)
            ]
            for listener in started:
                handled += listener.finish().handled
            started[0].check_drained(settings, ctx.recorder, NAME, engine.name)
    finally:
        engine.drop(settings)
    if len({h.event_id for h in handled}) != events:
        ctx.recorder.note(NAME, engine.name, f"{tag}: {len(handled):,} of {events:,} events handled")
    if not handled:
        return 1e-6
    return max(max(h.finished for h in handled) - min(h.started for h in handled), 1) / 1e9


def _relay_alone(url: str, events: int, repeat: int) -> float:
    """Microseconds per message through the relay handler itself, given
    batches of 100 as claims hand them, with no database or listener (its
    connecting, a few ms, is in the time)."""
    from subscriptions.testing import load_handlers, make_event

    handler = load_handlers(config={"nats": {"url": url}})["nats"]
    batches = []
    for first in range(1, events + 1, 100):
        batch = [
            make_event("nats", table="ITEMS", id=n, pk={"ID": n}, new={"ID": n, "NAME": f"item {n}", "SLEEP_MS": None})
            for n in range(first, first + 100)
        ]
        for event in batch:
            event.database_id = f"w7-alone-{repeat}"  # a new message id each repeat: none is a duplicate
        batches.append(batch)
    started = time.perf_counter()
    for batch in batches:
        if any(handler.function(batch)):
            raise RuntimeError("the relay failed a benchmark event")
    return (time.perf_counter() - started) / (len(batches) * 100) * 1e6


def run(ctx: Context, engine: Engine) -> None:
    rec, events = ctx.recorder, ctx.sizes.w7_events
    alone_events = min(ALONE_EVENTS, 10 * events)
    with tempfile.TemporaryDirectory(prefix="subs-nats-") as directory:
        server = test_helper("natsserver").NatsServer(Path(directory))
        try:
            from nats.js.api import StreamConfig

            server.jetstream("add_stream", StreamConfig(name="SUBS", subjects=["subs.>"]))
            env = {"SUBS__BENCH_NATS__URL": server.url}
            for repeat in range(1, ctx.repeat + 1):
                for label, (listeners, mode) in MODES.items():
                    ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {label}")
                    noop = _span(ctx, engine, TAG, events, env, listeners, *mode)
                    relay = _span(ctx, engine, "bench_nats", events, env, listeners, *mode)
                    rec.add(NAME, engine.name, f"{NOOP}, {label}", "events/s", "ev/s", events / noop, repeat)
                    rec.add(NAME, engine.name, f"{RELAY}, {label}", "events/s", "ev/s", events / relay, repeat)
                    rec.add(NAME, engine.name, f"{RELAY}, {label}", "x no-op", "x", noop / relay, repeat)
                ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {ALONE}")
                per_message = _relay_alone(server.url, alone_events, repeat)
                rec.add(NAME, engine.name, ALONE, "per message", "µs", per_message, repeat)
            stored = server.jetstream("stream_info", "SUBS").state.messages
            expected = (events * len(MODES) + alone_events) * ctx.repeat
            if stored != expected:
                rec.note(NAME, engine.name, f"the stream holds {stored:,} messages, expected {expected:,}")
        finally:
            server.kill()
    rec.note(NAME, engine.name, "rate: events / (last handler finish - first handler start)")
