"""Commands that run and control the listener: listen, stop, systemd-unit, handlers."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys

import click
from click.core import ParameterSource
from firebird.driver import DatabaseError

from subscriptions import logs
from subscriptions.config import MAX_SECONDS
from subscriptions.db.errors import first_line
from subscriptions.delivery import metrics_server as endpoint
from subscriptions.delivery import startup
from subscriptions.delivery.metrics import Metrics
from subscriptions.delivery.options import BLOCK, DEAD, ORDERED, PARALLEL, ListenOptions
from subscriptions.delivery.supervisor import Supervisor
from subscriptions.errors import SubsError
from subscriptions.ops import detach as background
from subscriptions.ops import systemd
from subscriptions.ops.status import left_behind
from subscriptions.ops.text_table import render
from subscriptions.plugins import (
    BUILTIN_TAGS,
    PLUGINS_ENV,
    collect_handlers,
    plugin_manager,
    plugin_specs,
    unused_tables,
)

from . import Seconds, app, cli, stopping
from .stopping import Terminated, shut_down_by

# Upper bounds on the listener's sizes (on its times: MAX_SECONDS): a batch
# past an INTEGER crash-looped the claimer, and each worker is a process.
MAX_BATCH = 10_000
MAX_WORKERS = 256
MAX_ATTEMPTS = 1_000_000
MIN_HANDLER_MEMORY = 64  # MiB: a handler process takes about 27 before its first job
_SECONDS = Seconds(min=0, max=MAX_SECONDS)
_POSITIVE = Seconds(min=0, min_open=True, max=MAX_SECONDS)
AUTO = "auto"


def _batch_size(ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    """``auto`` (None: sized by handler times) or a whole number from 1 to MAX_BATCH."""
    if value == AUTO:
        return None
    size = int(value) if value.isdigit() else 0
    if not 1 <= size <= MAX_BATCH:
        raise click.BadParameter(f"{value!r} is neither '{AUTO}' nor a whole number from 1 to {MAX_BATCH}", ctx, param)
    return size


def _check_in_fresh_process(options: ListenOptions) -> None:
    """Run the start-up checks in a child interpreter, so that this process
    never loads the Firebird engine (it is about to fork into the background)
    and a bad setup is still reported here. A plain subprocess: multiprocessing
    would leave its resource tracker running with our stdout and stderr, and
    whoever reads them (a pipe, ssh) would wait for ever."""
    child = subprocess.run(
        [sys.executable, "-c", "from subscriptions.delivery.startup import check_main; check_main()"],
        input=pickle.dumps(options),
        capture_output=True,
    )
    if child.returncode != 0:
        message = child.stderr.decode(errors="replace").strip().splitlines()
        raise SubsError(message[-1] if message else f"start-up check failed with exit code {child.returncode}")


@cli.command()
@click.option(
    "--mode",
    type=click.Choice([ORDERED, PARALLEL]),
    default=ORDERED,
    show_default=True,
    help="ordered: each stream's events (a table's subscriptions of one tag) strictly in log order; "
    "parallel: any order.",
)
@click.option(
    "--workers", type=click.IntRange(1, MAX_WORKERS), help="Handler processes [default: 1 ordered, 4 parallel]."
)
@click.option(
    "--key-order", is_flag=True, help="With --mode parallel: events of one row (table, tag, primary key) in log order."
)
@click.option(
    "--batch",
    metavar="N|auto",
    callback=_batch_size,
    default=AUTO,
    show_default=True,
    help="Events claimed and acknowledged per transaction; auto: about 100 ms of handler time, at most 100.",
)
@click.option("--tag", "tags", multiple=True, help="Only handle these tags (repeatable).")
@click.option(
    "--plugin",
    "plugins",
    multiple=True,
    metavar="MODULE_OR_PATH",
    help=f"Load a handler plugin (repeatable). Env: {PLUGINS_ENV} (separated by '{os.pathsep}').",
)
@click.option(
    "--poll",
    type=_POSITIVE,
    default=5.0,
    show_default=True,
    help="Seconds between checks when no event notification arrives.",
)
@click.option(
    "--lease",
    type=_POSITIVE,
    default=30.0,
    show_default=True,
    help="Seconds a claim lasts without a heartbeat (a crashed worker's events come back after it).",
)
@click.option(
    "--timeout",
    type=_POSITIVE,
    default=60.0,
    show_default=True,
    help="Seconds a handler may run before the attempt counts as failed.",
)
@click.option(
    "--grace",
    type=_SECONDS,
    default=30.0,
    show_default=True,
    help="Seconds running handlers get to finish on SIGTERM, SIGINT or SIGHUP.",
)
@click.option(
    "--handler-memory-limit",
    type=click.IntRange(MIN_HANDLER_MEMORY),
    metavar="MIB",
    help="Replace a handler process by a fresh one after the job in which its resident memory "
    "grew past this many MiB (handlers that leak).",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, MAX_ATTEMPTS),
    default=10,
    show_default=True,
    help="Attempts an event gets before --on-failure applies.",
)
@click.option(
    "--backoff-min",
    type=_SECONDS,
    default=1.0,
    show_default=True,
    help="Seconds before the first retry; doubles per attempt, with jitter, never under this.",
)
@click.option("--backoff-max", type=_SECONDS, default=300.0, show_default=True, help="Seconds a retry waits at most.")
@click.option(
    "--on-failure",
    type=click.Choice([DEAD, BLOCK]),
    default=DEAD,
    show_default=True,
    help="After --max-attempts: move the event to the dead state, or keep retrying it.",
)
@click.option(
    "--drain",
    is_flag=True,
    help="Handle what is pending now, print a summary and exit; exit 1 if failing or dead events are left, "
    "or if it was stopped before it ended.",
)
@click.option(
    "--drain-patience",
    type=_SECONDS,
    default=60.0,
    show_default=True,
    help="With --drain: seconds to go on while the database or the claimer keeps failing "
    "and no event is settled, or while another transaction's lock holds up settling; then give up and exit 1.",
)
@click.option("--detach", is_flag=True, help="Run in the background (needs --pidfile and --logfile).")
@click.option("--pidfile", type=click.Path(dir_okay=False), help="With --detach: where to write the pid.")
@click.option("--logfile", type=click.Path(dir_okay=False), help="Append logs to this file.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line, for a log shipper.",
)
@click.option(
    "--log-level",
    type=click.Choice(logs.LEVELS),
    default="INFO",
    show_default=True,
    help="The least important log lines written.",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus metrics on this port.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for --metrics-port.")
@click.pass_context
def listen(
    ctx: click.Context,
    mode: str,
    workers: int | None,
    plugins: tuple[str, ...],
    detach: bool,
    pidfile: str | None,
    logfile: str | None,
    log_format: str,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
    tags: tuple[str, ...],
    key_order: bool,
    batch: int | None,
    poll: float,
    lease: float,
    timeout: float,
    grace: float,
    handler_memory_limit: int | None,
    max_attempts: int,
    backoff_min: float,
    backoff_max: float,
    on_failure: str,
    drain: bool,
    drain_patience: float,
) -> None:
    """Wait for subscribed changes and hand each event to its tag's handler."""
    if detach and not (pidfile and logfile):
        raise click.UsageError("--detach needs --pidfile and --logfile")
    if pidfile and not detach:
        raise click.UsageError("--pidfile is written only with --detach; add --detach or drop --pidfile")
    if backoff_min > backoff_max:
        raise click.UsageError(f"--backoff-min ({backoff_min:g}) is more than --backoff-max ({backoff_max:g})")
    if not drain and ctx.get_parameter_source("drain_patience") is not ParameterSource.DEFAULT:
        raise click.UsageError("--drain-patience applies to --drain only; add --drain or drop it")
    if key_order and mode != PARALLEL:
        raise click.UsageError("--key-order needs --mode parallel (ordered mode already keeps log order)")
    options = ListenOptions(
        settings=app(ctx).settings,
        mode=mode,
        workers=workers or (1 if mode == ORDERED else 4),
        tags=tags,
        plugins=plugin_specs(plugins),
        handler_config=app(ctx).config.handlers,
        log_level=log_level,
        log_format=log_format,
        log_file=logfile,
        key_order=key_order,
        batch=batch,
        poll=poll,
        lease=lease,
        timeout=timeout,
        grace=grace,
        handler_memory_limit=handler_memory_limit,
        max_attempts=max_attempts,
        backoff_min=backoff_min,
        backoff_max=backoff_max,
        on_failure=on_failure,
        drain=drain,
        drain_patience=drain_patience,
    )
    metrics = Metrics()
    metrics_server = endpoint.bind(metrics, metrics_port, metrics_host) if metrics_port is not None else None
    try:
        if detach and pidfile and logfile:
            _check_in_fresh_process(options)
            background.detach(pidfile=pidfile, logfile=logfile)
        logs.configure(level=log_level, fmt=log_format, logfile=logfile)
        if not detach:
            startup.check(options)
        startup.prepare(options)
        if metrics_server is not None:
            metrics_server.start()
        if stopping.requested():  # noted while the driver attached: the engine may still run
            raise Terminated
        supervisor = Supervisor(options, metrics)
        supervisor.run(with_queue_metrics=metrics_server is not None, adopt_orphans=True)
    except (KeyboardInterrupt, Terminated, SubsError, DatabaseError) as exc:
        # A stop signal before the supervisor took them over (loading plugins,
        # their start-up checks): a stop, as after, not an error; and so is a
        # lost connection after one, of the engine the client library shut down.
        if isinstance(exc, (SubsError, DatabaseError)) and shut_down_by(exc) is None:
            raise
        if drain:
            raise SubsError(f"the drain {_STOPPED}; the events left wait for the next run") from None
        click.echo("subs listener stopped before it started serving", err=True)
        return
    finally:
        if metrics_server is not None:
            metrics_server.close()
    code = _drain_summary(options, metrics) if drain else 0
    if supervisor.ended:
        raise SubsError(f"the listener stopped: {supervisor.ended}")
    if drain:
        cut_short = _cut_short(supervisor)
        if cut_short:
            raise SubsError(f"the drain {cut_short}; the events left wait for the next run")
        ctx.exit(code)


_STOPPED = "was stopped (SIGTERM, SIGINT or SIGHUP) before it ended"


def _cut_short(supervisor: Supervisor) -> str | None:
    """How a drain ended before it got through what it could handle, if it did."""
    if supervisor.gave_up:
        return f"was given up: {supervisor.gave_up}"
    if supervisor.stopping:
        return _STOPPED
    return None


def _drain_summary(options: ListenOptions, metrics: Metrics) -> int:
    """Print what a --drain run did and left behind, in one line; 1 when it
    left failing or dead events (for scripts and CI jobs), or when what it
    left cannot be read."""
    done = metrics.totals()
    summary = f"drained: {done['handled']} handled, {done['failed']} failed attempt(s), {done['dead']} died; "
    try:
        left = left_behind(options.settings, options.tags)
    except (DatabaseError, SubsError) as exc:
        click.echo(f"{summary}left: not known ({first_line(exc)})")
        return 1
    click.echo(f"{summary}left: {left.waiting} waiting, {left.failing} failing, {left.dead} dead")
    return 1 if left.failing or left.dead else 0


@cli.command()
@click.option(
    "--pidfile", required=True, type=click.Path(dir_okay=False), help="The pidfile of `subs listen --detach`."
)
@click.option("--timeout", type=_POSITIVE, default=60.0, show_default=True, help="Seconds to wait for it to exit.")
def stop(pidfile: str, timeout: float) -> None:
    """Stop a background listener gracefully (SIGTERM) and wait for it."""
    pid = background.stop(pidfile, timeout=timeout)
    click.echo(f"stopped subs listener pid {pid}")


def _identity_arguments(ctx: click.Context) -> list[str]:
    """The --user and --role typed on this command line, which the service must
    attach with too; the environment file is where the rest of them belong."""
    group = ctx.find_root()
    arguments: list[str] = []
    for option in ("user", "role"):
        if group.get_parameter_source(option) is ParameterSource.COMMANDLINE:
            arguments += [f"--{option}", group.params[option]]
    return arguments


@cli.command(name="systemd-unit", context_settings={"ignore_unknown_options": True})
@click.option(
    "--environment-file",
    default="/etc/subs/subs.env",
    show_default=True,
    help="File with ISC_USER / ISC_PASSWORD / SUBS_* settings (keeps secrets out of the unit).",
)
@click.option("--run-as", help="User= of the service.")
@click.argument("listen_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def systemd_unit(ctx: click.Context, environment_file: str, run_as: str | None, listen_args: tuple[str, ...]) -> None:
    """Print a systemd unit running `subs listen LISTEN_ARGS` for this database."""
    if "--detach" in listen_args:
        raise click.UsageError("systemd runs the listener in the foreground: leave out --detach")
    # The listener's options are checked now, not when systemd starts it.
    grace = listen.make_context("listen", list(listen_args), parent=ctx.parent).params["grace"]
    settings = app(ctx).settings
    executable = shutil.which("subs") or os.path.join(os.path.dirname(sys.executable), "subs")
    arguments = ["-d", settings.target]
    config_path = app(ctx).config_path
    if config_path:
        arguments += ["--config", os.path.abspath(config_path)]
    arguments += _identity_arguments(ctx)
    try:
        text = systemd.systemd_unit(
            executable=os.path.abspath(executable),
            arguments=[*arguments, "listen", *listen_args],
            working_directory=os.getcwd(),
            environment_file=environment_file,
            grace=grace,
            user=run_as,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if ctx.find_root().get_parameter_source("password") is ParameterSource.COMMANDLINE:
        click.echo(f"note: the unit leaves out --password; put ISC_PASSWORD=... in {environment_file}", err=True)
    click.echo(text, nl=False)


@cli.command()
@click.option("--plugin", "plugins", multiple=True, metavar="MODULE_OR_PATH", help="Also load this plugin.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def handlers(ctx: click.Context, plugins: tuple[str, ...], as_json: bool) -> None:
    """List handler tags and the plugin providing each."""
    config = app(ctx).config.handlers
    collected = collect_handlers(plugin_manager(plugin_specs(plugins)), config)
    for note in unused_tables(collected, config):
        click.echo(f"note: {note}", err=True)
    found = sorted(collected.values(), key=lambda h: h.tag)
    if as_json:
        listed = [{"tag": h.tag, "plugin": h.plugin, "transactional": h.transactional, "batch": h.batch} for h in found]
        click.echo(json.dumps(listed, indent=2))
        return
    if not found:
        click.echo(
            f"no handlers: a built-in one ({', '.join(BUILTIN_TAGS)}) is active once subs.toml has a "
            "[handlers.TAG] table for it; --plugin, SUBS_PLUGINS or an installed plugin adds your own"
        )
        return
    yes_no = {True: "yes", False: "no"}
    rows = [(h.tag, h.plugin, yes_no[h.transactional], yes_no[h.batch]) for h in found]
    click.echo(render(("TAG", "PLUGIN", "TRANSACTIONAL", "BATCH"), rows))
