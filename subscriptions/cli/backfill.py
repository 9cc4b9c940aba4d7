"""`subs backfill`: deliver the rows already in a table, with progress."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import click

from subscriptions.delivery.lifeline import stop_signals
from subscriptions.ops.backfill import Progress, backfill

from . import cli, open_database


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


# Seconds between two progress lines when the output is not a terminal: a
# cron log gets a few lines per minute, not one per chunk.
LINE_EVERY = 10.0


def describe(state: Progress) -> str:
    """``rows done/total (percent), rate, time left``: the line a run prints
    when its output is not a terminal."""
    rate = state.rows_this_run / state.seconds if state.seconds > 0 else 0.0
    share = 100.0 * state.rows_done / state.rows_total if state.rows_total else 100.0
    left = (state.rows_total - state.rows_done) / rate if rate > 0 else 0.0
    text = f"{state.rows_done:,}/{state.rows_total:,} rows ({share:.1f}%), {rate:,.0f} rows/s"
    return text + ("" if state.finished else f", {_duration(left)} left")


def _rate_shown(rate: str | None) -> str | None:
    return rate


class _Display:
    """A progress bar on a terminal, otherwise a plain line after the first
    chunk, every ``LINE_EVERY`` seconds and at the end."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.bar: Any = None
        self.shown = 0
        self.line_at: float | None = None

    def __call__(self, state: Progress) -> None:
        if not self.stream.isatty():
            if self.line_at is None or state.finished or state.seconds - self.line_at >= LINE_EVERY:
                click.echo(f"backfill {state.table} {state.tag}: {describe(state)}", file=self.stream)
                self.line_at = state.seconds
            return
        if self.bar is None:
            self.bar = click.progressbar(
                None,
                length=state.rows_total,
                label=f"backfill {state.table} {state.tag}",
                show_eta=True,
                show_pos=True,
                item_show_func=_rate_shown,
                file=self.stream,
            )
            self.bar.__enter__()
            self.shown = state.rows_done - state.rows_this_run
            self.bar.update(self.shown)
        self.bar.length = max(self.bar.length, state.rows_total)
        rate = state.rows_this_run / state.seconds if state.seconds > 0 else 0.0
        self.bar.update(state.rows_done - self.shown, f"{rate:,.0f} rows/s")
        self.shown = state.rows_done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


@contextlib.contextmanager
def _stop_between_chunks() -> Iterator[Callable[[], bool]]:
    """Have the first stop signal (SIGTERM, SIGINT, SIGHUP: ``stop_signals``)
    stop the run after its chunk, with a line that says where it stands, and
    a second one at once. Set after the attach: the client library takes
    SIGINT and SIGTERM over as it starts and, on either, shuts its engine
    down under the run (then calls the handler it replaced), which then
    fails with "connection shutdown". Main thread only."""
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if received:
            raise KeyboardInterrupt
        received.append(signum)

    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    previous = {signum: signal.signal(signum, stop) for signum in stop_signals()}
    try:
        yield lambda: bool(received)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@cli.command(name="backfill")
@click.argument("table")
@click.argument("tag")
@click.option("--where", metavar="SQL", help="Only the rows this SQL condition on the table's columns selects.")
@click.option(
    "--batch",
    "chunk",
    type=click.IntRange(min=1, max=100_000),
    default=1000,
    show_default=True,
    help="Rows per chunk; each chunk is one short transaction.",
)
@click.option(
    "--restart",
    is_flag=True,
    help="Deliver every row from the first, even after an unfinished run (which goes on) or a finished one "
    "(which is not done again).",
)
@click.pass_context
def backfill_command(ctx: click.Context, table: str, tag: str, where: str | None, chunk: int, restart: bool) -> None:
    """Deliver the rows already in TABLE to its insert subscription for TAG,
    as insert events, in primary-key order; a run that was stopped goes on
    where it stopped, and one that is done is not done again without
    --restart."""
    db = open_database(ctx)
    display = _Display(sys.stderr)
    try:
        with _stop_between_chunks() as stop_requested:
            state = backfill(
                db,
                table,
                tag,
                where=where,
                chunk=chunk,
                restart=restart,
                progress=display,
                stop_requested=stop_requested,
            )
    finally:
        display.close()
    if state.done_before:
        selection = f" with --where {where!r}" if where else ""
        click.echo(
            f"the backfill of {state.table} for {state.tag}{selection} is done ({state.rows_done:,} row(s), "
            f"{state.events:,} event(s)): nothing to do; add --restart to deliver every row again"
        )
        return
    resumed = " (resumed)" if state.resumed else ""
    click.echo(
        f"backfilled {state.table} for {state.tag}{resumed}: {state.events:,} event(s) from "
        f"{state.rows_done:,} row(s) in {_duration(state.seconds)}"
    )
