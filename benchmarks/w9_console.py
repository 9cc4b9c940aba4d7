"""W9: the console's cost against the length of the log. A real `subs web`
process answers the overview, the subscription list and the first page of
pending events, each many times, with 1,000 and then with 1,000,000
pending events in EVENT_LOG (the same database, grown in between); the
figure is the median time per request and its ratio between the two."""

from __future__ import annotations

import http.client
import statistics
import subprocess
import time
from urllib.parse import urlsplit

from . import PYTHON
from .app import execute, subscribed_items
from .config import Context, Sizes
from .engines import Engine

NAME = "W9"
ENGINES = ("fb5", "fb3")
PAGES = {
    "overview page": "/",
    "subscription list (API)": "/api/subscriptions",
    "first page of pending events": "/events?state=pending",
}
REQUESTS = 30


def title(sizes: Sizes) -> str:
    return f"console pages with {sizes.w9_small:,} and {sizes.w9_large:,} pending events"


class _Console:
    def __init__(self, engine: Engine, settings) -> None:
        self.process = subprocess.Popen(
            [PYTHON, "-m", "subscriptions", "-d", settings.dsn, "web", "--port", "0", "--log-level", "WARNING"],
            env=engine.env(settings),
            stdout=subprocess.PIPE,
            text=True,
        )
        address = (self.process.stdout.readline() if self.process.stdout else "").split(": ", 1)[1].strip()
        parts = urlsplit(address)
        self.host, self.port = parts.hostname or "", parts.port or 0
        self.token = parts.query.removeprefix("token=")

    def seconds(self, path: str) -> float:
        """The median time of REQUESTS requests (after one to warm up)."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        times = []
        for attempt in range(REQUESTS + 1):
            started = time.perf_counter()
            connection.request("GET", path, headers={"Authorization": f"Bearer {self.token}"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status}")
            if attempt:
                times.append(time.perf_counter() - started)
        connection.close()
        return statistics.median(times)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _measure(engine: Engine, settings) -> dict[str, float]:
    console = _Console(engine, settings)
    try:
        return {case: console.seconds(path) for case, path in PAGES.items()}
    finally:
        console.stop()


def run(ctx: Context, engine: Engine) -> None:
    rec, small, large = ctx.recorder, ctx.sizes.w9_small, ctx.sizes.w9_large
    for repeat in range(1, ctx.repeat + 1):
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}")
        settings = subscribed_items(engine, "w9")
        try:
            execute(settings, "items_bulk_insert", params=(1, small))
            few = _measure(engine, settings)
            execute(settings, "items_bulk_insert", params=(small + 1, large - small))
            many = _measure(engine, settings)
        finally:
            engine.drop(settings)
        for case in PAGES:
            rec.add(NAME, engine.name, case, f"ms, {small:,} pending", "ms", few[case] * 1000, repeat)
            rec.add(NAME, engine.name, case, f"ms, {large:,} pending", "ms", many[case] * 1000, repeat)
            rec.add(NAME, engine.name, case, "x small log", "x", many[case] / few[case], repeat)
    rec.note(
        NAME,
        engine.name,
        f"median of {REQUESTS} requests to a real `subs web` process; one subscription with every event "
        "pending; x small log: the time with the long log / with the short one",
    )
