"""Commands that watch and repair the event log: status, failed, dead, retry, purge."""

from __future__ import annotations

import time

import click
from firebird.driver import DatabaseError

from subscriptions.config import MAX_SECONDS
from subscriptions.errors import SubsError
from subscriptions.events import MAX_EVENT_ID, dumps
from subscriptions.ops import repair
from subscriptions.ops.status import PARTIAL_VIEW, drifted, lagging, problems, read_status
from subscriptions.ops.text_table import describe_age, render

from . import Seconds, app, cli, open_database, stopping
from .stopping import Terminated, shut_down_by


def _print_status(ctx: click.Context, as_json: bool) -> None:
    status = read_status(app(ctx).settings)
    rows = status.subscriptions
    notes = [] if status.sees_every_attachment else [PARTIAL_VIEW]
    if status.open_transaction is not None:
        notes.append(status.open_transaction.describe())
    if as_json:  # the JSON stays the list scripts read; its notes go to stderr, as `subs failed`'s do
        click.echo(dumps([row.as_dict() for row in rows], indent=2))
        for note in notes:
            click.echo(f"note: {note}", err=True)
        return
    headers = (
        "ID",
        "TABLE",
        "ACTION",
        "TAG",
        "PENDING",
        "IN FLIGHT",
        "FAILED",
        "DEAD",
        "OLDEST PENDING",
        "CAPTURE",
        "LISTENING",
        "BACKFILL",
    )
    click.echo(
        render(
            headers,
            [
                (
                    r.sub_id,
                    r.table,
                    r.action,
                    r.tag + ("" if r.active else " (removed)") + (" (paused)" if r.paused else ""),
                    r.pending,
                    r.in_flight,
                    r.failed,
                    r.dead,
                    describe_age(r.oldest_pending_age),
                    r.capture if r.active else "-",
                    r.listening,
                    r.backfill.describe() if r.backfill else "-",
                )
                for r in rows
            ],
        )
    )
    for note in notes:
        click.echo(f"\nnote: {note}")


def _check(ctx: click.Context, max_lag: float | None, as_json: bool) -> None:
    """One line (or JSON object) per subscription whose capture drifted, or
    whose oldest live event is older than ``max_lag`` seconds; exit 1 if any."""
    status = read_status(app(ctx).settings)
    rows = status.subscriptions
    found = [(row, "capture", row.capture) for row in drifted(rows)]
    nobody = "no listener takes tag" if status.sees_every_attachment else "no listener of this user takes tag"
    if max_lag is not None:
        found += [
            (
                row,
                "lag",
                f"its oldest live event is {describe_age(row.oldest_pending_age)} old (--max-lag "
                f"{describe_age(max_lag)}); "
                + (f"listening: {row.listening}" if row.listeners else f"{nobody} {row.tag}"),
            )
            for row in lagging(rows, max_lag)
        ]
    if as_json:
        problems = [
            {
                "sub_id": row.sub_id,
                "table": row.table,
                "action": row.action,
                "tag": row.tag,
                "check": check,
                "problem": text,
            }
            for row, check, text in found
        ]
        click.echo(dumps(problems, indent=2))
        ctx.exit(1 if found else 0)
    for row, _, problem in found:
        click.echo(f"subscription {row.sub_id} ({row.table} {row.action} {row.tag}): {problem}")
    if found:
        ctx.exit(1)
    lag = "" if max_lag is None else f", none lags over {describe_age(max_lag)}"
    click.echo(f"all {sum(row.active for row in rows)} subscription(s) are captured{lag}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--watch", type=Seconds(0.5, MAX_SECONDS), metavar="SECONDS", help="Refresh every SECONDS until Ctrl-C.")
@click.option(
    "--check",
    is_flag=True,
    help="For monitoring: name each subscription whose table or capture trigger is missing or stale; exit 1 if any.",
)
@click.option(
    "--max-lag",
    type=Seconds(1, MAX_SECONDS),
    metavar="SECONDS",
    help="With --check: also name each unpaused subscription whose oldest live event is older than SECONDS.",
)
@click.pass_context
def status(ctx: click.Context, as_json: bool, watch: float | None, check: bool, max_lag: float | None) -> None:
    """Per subscription: pending, in flight, failed, dead, oldest pending age,
    whether its table is captured as it should be, and the listeners that
    take its tag."""
    if max_lag is not None and not check:
        raise click.UsageError("--max-lag is a limit for --check; add --check")
    if check and watch is not None:
        raise click.UsageError("--check looks once, for monitoring, and --watch keeps looking; drop one")
    if check:
        _check(ctx, max_lag, as_json)
        return
    if watch is None:
        _print_status(ctx, as_json)
        return
    try:
        while not stopping.requested():
            click.clear()
            click.echo(time.strftime("%Y-%m-%d %H:%M:%S"))
            _print_status(ctx, as_json)
            if not stopping.requested():
                time.sleep(watch)
    except (KeyboardInterrupt, Terminated):
        pass
    except (SubsError, DatabaseError) as exc:
        if shut_down_by(exc) is None:  # not a refresh a stop cut short (stopping.py)
            raise


def _print_problems(ctx: click.Context, kind: str, as_json: bool, limit: int) -> None:
    """The oldest ``limit`` (0: all) events of ``kind``, and a note on
    stderr when there are more: a day of a broken handler can leave
    millions, which no terminal and no memory should take at once."""
    rows = problems(open_database(ctx), kind, limit + 1 if limit else MAX_EVENT_ID)
    more = limit != 0 and len(rows) > limit
    rows = rows[:limit] if more else rows
    if more:
        click.echo(f"note: more {kind} events than these {limit}, the oldest; `--limit 0` lists all", err=True)
    if as_json:
        click.echo(dumps([r.as_dict() for r in rows], indent=2))
        return
    if not rows:
        click.echo(f"no {kind} events")
        return
    when = "NEXT ATTEMPT" if kind == "failed" else "DEAD SINCE"
    click.echo(
        render(
            ("ID", "TAG", "CHANGE", "KEY", "ATTEMPTS", when, "LAST ERROR"),
            [
                (
                    r.id,
                    r.tag,
                    f"{r.table} {r.action}",
                    dumps(r.pk),
                    r.attempts,
                    r.when.isoformat(sep=" ", timespec="seconds") if r.when else "-",
                    (r.last_error or "").replace("\n", " ")[:80],
                )
                for r in rows
            ],
        )
    )


_LIMIT = click.option(
    "--limit",
    type=click.IntRange(0, MAX_EVENT_ID - 1),
    default=100,
    show_default=True,
    help="List the oldest this many; 0: all.",
)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_LIMIT
@click.pass_context
def failed(ctx: click.Context, as_json: bool, limit: int) -> None:
    """Events whose last attempt failed and that wait for a retry."""
    _print_problems(ctx, "failed", as_json, limit)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_LIMIT
@click.pass_context
def dead(ctx: click.Context, as_json: bool, limit: int) -> None:
    """Events that used up their attempts (kept until purged)."""
    _print_problems(ctx, "dead", as_json, limit)


@cli.command()
@click.argument("event_ids", nargs=-1, type=click.IntRange(1, MAX_EVENT_ID))
@click.option("--tag", help="Retry the dead events of this tag.")
@click.option("--all", "everything", is_flag=True, help="Retry every dead event.")
@click.pass_context
def retry(ctx: click.Context, event_ids: tuple[int, ...], tag: str | None, everything: bool) -> None:
    """Re-queue dead events: by EVENT_IDS, by --tag, or --all."""
    count = repair.retry(open_database(ctx), ids=event_ids, tag=tag, everything=everything)
    click.echo(f"re-queued {count} dead event(s)")


@cli.command()
@click.option("--older-than", "age", required=True, metavar="AGE", help="e.g. 30m, 12h, 7d; 0s for all.")
@click.pass_context
def purge(ctx: click.Context, age: str) -> None:
    """Delete dead events that died more than AGE ago."""
    events, subscriptions = repair.purge(open_database(ctx), repair.parse_age(age))
    click.echo(f"deleted {events} dead event(s) and {subscriptions} removed subscription(s) without events")
