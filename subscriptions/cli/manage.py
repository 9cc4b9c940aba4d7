"""Commands that manage the schema and subscriptions: init, add, remove, pause, resume, list, grant, demo."""

from __future__ import annotations

import json

import click

from subscriptions.capture import subscribers
from subscriptions.capture.triggers import Subscription
from subscriptions.db.errors import MissingDatabase
from subscriptions.errors import SubsError
from subscriptions.ops import demo, grants
from subscriptions.ops.setup import init_database
from subscriptions.ops.text_table import render
from subscriptions.plugins import BUILTIN_TAGS, collect_handlers, plugin_manager, plugin_specs

from . import app, cli, open_database


@cli.command()
@click.option("--create", is_flag=True, help="Create the database file first if it is missing.")
@click.pass_context
def init(ctx: click.Context, create: bool) -> None:
    """Install or upgrade subs's tables (EVENT_SUBSCRIBER, EVENT_LOG); on a current schema, make the
    stale capture triggers again (after a restore on a later Firebird)."""
    try:
        db = open_database(ctx, current=False)
    except MissingDatabase:
        if not create:
            raise
        db = open_database(ctx, create=True, current=False)
        click.echo(f"created database {app(ctx).settings.dsn}")
    done = init_database(db)
    if done.before == done.after:
        click.echo(f"schema is up to date (version {done.after})")
    elif done.before == 0:
        click.echo(f"installed schema version {done.after}")
    else:
        click.echo(f"upgraded schema from version {done.before} to {done.after}")
    for user in done.regranted:
        click.echo(f"granted {user} this version's listener rights")
    for table in done.remade:
        click.echo(
            f"made the capture trigger of {table} again: it was not what this release makes on this engine "
            "(a database restored on a later Firebird, or DDL that skipped database triggers)"
        )


def _describe(change: subscribers.Change) -> str:
    s = change.subscription
    text = f"{change.outcome}: {s.table} {s.action} {s.tag} (subscription {s.sub_id})"
    if change.outcome == "unchanged":
        text = f"already subscribed: {s.table} {s.action} {s.tag} (subscription {s.sub_id})"
    if change.outcome == "repaired":
        text = (
            f"already subscribed: {s.table} {s.action} {s.tag} (subscription {s.sub_id}); "
            "its capture trigger had drifted and was made again"
        )
    if change.outcome == "deactivated":
        text = (
            f"removed: {s.table} {s.action} {s.tag}; {change.events} event(s) kept and still "
            "delivered (use --purge to delete them)"
        )
    elif change.outcome == "removed" and change.events:
        text += f"; {change.events} event(s) purged"
    elif change.outcome == "updated" and change.before is not None:
        text += f": {_differences(change.before, s)}"
    return text


def _differences(before: Subscription, after: Subscription) -> str:
    """What an add changed, so that an option it left out and so dropped
    (a --when, say) is seen to go."""
    said = [] if before.active else ["it had been removed; it is active again"]
    if before.columns != after.columns:
        said.append(f"--columns {','.join(before.columns) or 'none'} -> {','.join(after.columns) or 'none'}")
    if before.when != after.when:
        said.append(f"--when {before.when or 'none'} -> {after.when or 'none'}")
    return "; ".join(said)


@cli.command()
@click.argument("table")
@click.argument("actions")
@click.argument("tag")
@click.option(
    "--columns",
    metavar="C1,C2",
    help="Updates produce an event only when one of these columns changed (NULL-safe).",
)
@click.option(
    "--when",
    "condition",
    metavar="SQL",
    help="Only changes satisfying this SQL condition on NEW/OLD produce an event.",
)
@click.pass_context
def add(
    ctx: click.Context,
    table: str,
    actions: str,
    tag: str,
    columns: str | None,
    condition: str | None,
) -> None:
    """Subscribe TAG to ACTIONS (any of I, U, D) on TABLE."""
    db = open_database(ctx)
    for change in subscribers.add(db, table, actions, tag, columns, condition):
        click.echo(_describe(change))
    _note_unhandled(ctx, tag)


def _note_unhandled(ctx: click.Context, tag: str) -> None:
    """Say so when no plugin known here handles ``tag``. That is allowed (the
    listener may run elsewhere, with other plugins), but a mistyped tag would
    otherwise only show as events that never leave."""
    try:
        handlers = collect_handlers(plugin_manager(plugin_specs()), app(ctx).config.handlers)
    except SubsError:
        return  # a plugin that fails to load is the listener's and `subs handlers`'s to report
    if tag in handlers:
        return
    remedy = "give the listener a plugin that registers it (--plugin, SUBS_PLUGINS or an installed one)"
    if tag in BUILTIN_TAGS:
        remedy = f"the built-in one is active once subs.toml has a [handlers.{tag}] table, or {remedy}"
    click.echo(
        f"note: no handler here serves tag {tag!r}, so its events wait: {remedy}; `subs handlers` lists the known tags",
        err=True,
    )


@cli.command()
@click.argument("table")
@click.argument("actions")
@click.argument("tag")
@click.option("--purge", is_flag=True, help="Also delete the subscription's pending events.")
@click.pass_context
def remove(ctx: click.Context, table: str, actions: str, tag: str, purge: bool) -> None:
    """Unsubscribe TAG from ACTIONS on TABLE (pending events are kept unless --purge)."""
    db = open_database(ctx)
    for change in subscribers.remove(db, table, actions, tag, purge=purge):
        click.echo(_describe(change))


def _pause_or_resume(ctx: click.Context, table: str, actions: str, tag: str, paused: bool) -> None:
    for change in subscribers.set_paused(open_database(ctx), table, actions, tag, paused):
        s = change.subscription
        what = f"{s.table} {s.action} {s.tag} (subscription {s.sub_id})"
        if change.outcome == "unchanged":
            click.echo(f"already {'paused' if paused else 'running'}: {what}")
        elif paused:
            click.echo(f"paused: {what}; its changes are still captured and wait for `subs resume`")
        else:
            click.echo(f"resumed: {what}; listeners deliver its waiting events at their next claim")


@cli.command()
@click.argument("table")
@click.argument("actions")
@click.argument("tag")
@click.pass_context
def pause(ctx: click.Context, table: str, actions: str, tag: str) -> None:
    """Stop delivering TAG's events of ACTIONS on TABLE: changes are still
    captured; running listeners claim none of them from their next claim on."""
    _pause_or_resume(ctx, table, actions, tag, True)


@cli.command()
@click.argument("table")
@click.argument("actions")
@click.argument("tag")
@click.pass_context
def resume(ctx: click.Context, table: str, actions: str, tag: str) -> None:
    """Deliver a paused subscription's events again, in order."""
    _pause_or_resume(ctx, table, actions, tag, False)


@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Show subscriptions with their pending and dead event counts, and
    whether each table's capture trigger matches the table (CAPTURE)."""
    rows = subscribers.listing(open_database(ctx))
    if as_json:
        click.echo(json.dumps([row.as_dict() for row in rows], indent=2, ensure_ascii=False))
        return
    if not rows:
        click.echo("no subscriptions; add one with `subs add TABLE ACTIONS TAG`")
        return
    headers = ("ID", "TABLE", "ACTION", "TAG", "COLUMNS", "WHEN", "PENDING", "DEAD", "STATE", "CAPTURE")
    click.echo(
        render(
            headers,
            [
                (
                    s.sub_id,
                    s.table,
                    s.action,
                    s.tag,
                    ",".join(s.columns),
                    s.when,
                    row.pending,
                    row.dead,
                    ("paused" if s.paused else "active") if s.active else "removed",
                    row.capture if s.active else "-",
                )
                for row in rows
                for s in [row.subscription]
            ],
        )
    )


@cli.command()
@click.argument("user")
@click.option(
    "--to-role",
    is_flag=True,
    help="USER names a role: grant the role, for listeners whose users connect with --role USER.",
)
@click.pass_context
def grant(ctx: click.Context, user: str, to_role: bool) -> None:
    """Give database USER the rights `subs listen` needs (writers need none)."""
    name = grants.grant_listener(open_database(ctx), user, to_role=to_role)
    click.echo(f"granted {'role ' if to_role else ''}{name} what `subs listen` needs")


@cli.command(name="demo")
@click.option(
    "--path",
    default="subs-demo.fdb",
    show_default=True,
    help="Embedded database file to (re)create for the demo.",
)
@click.option(
    "--rows", default=5, show_default=True, type=click.IntRange(1, 10_000), help="Languages the demo inserts."
)
def demo_(path: str, rows: int) -> None:
    """Create a demo database, subscribe to `languages` and show events arriving."""
    demo.run(path, rows, click.echo)
