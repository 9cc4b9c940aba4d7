"""The ``subs`` command line: click commands that parse, call and print.

Lives here: the group, its global options and the one place where errors a
user can fix become one line on stderr (``SubsGroup``: SubsError and engine
errors exit 1, usage errors exit 2); the commands, by concern, in ``manage``
(init, add, remove, list, demo), ``listen`` (listen, stop, systemd-unit,
handlers), ``monitor`` (status, failed, dead, retry, purge), ``backfill``
and ``web`` (the console); ``stopping``: what SIGTERM and Ctrl-C do.

May import: every other room.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click
from firebird.driver import DatabaseError

from subscriptions import __version__
from subscriptions.config import CONFIG_ENV, FileConfig, load_config, unknown_variables_note
from subscriptions.db.connection import Database
from subscriptions.db.errors import first_line, missing_right
from subscriptions.db.settings import DEFAULT_DATABASE, ConnectionSettings, stored_name
from subscriptions.db.terminal_stop import refuse_terminal_stop
from subscriptions.errors import SubsError
from subscriptions.schema.version import require_current

from . import stopping
from .stopping import Terminated, leave, shut_down_by, stops_noted

# Seconds a command waits for rows another transaction holds: subs's own
# transactions hold them for milliseconds, so a longer wait is for a
# transaction that is not ending, and the command says so rather than hang.
LOCK_WAIT = 10


class SubsGroup(click.Group):
    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's own handling, except that a usage error is one line too
        (click prints the usage block and a hint on lines of their own)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        not_text = _not_text(sys.argv[1:] if args is None else args)
        if not_text:
            click.echo(f"Error: {not_text}", err=True)
            sys.exit(2)
        try:
            with stops_noted():
                try:
                    # Without standalone mode click returns ctx.exit()'s code instead of exiting.
                    code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
                except click.ClickException as exc:
                    stop = shut_down_by(exc)
                    if stop is None:
                        raise
                    raise stop from None
            sys.exit(code if isinstance(code, int) else 0)
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            click.echo(f"Error: {exc.format_message()}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except Terminated:
            click.echo("Error: stopped by SIGTERM before it ended; what it had not committed is rolled back", err=True)
            sys.exit(1)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except SubsError as exc:
            raise click.ClickException(str(exc)) from None
        except DatabaseError as exc:
            found = ctx.find_object(App)
            refused = missing_right(exc, found.settings.effective_user) if found is not None else None
            raise click.ClickException(str(refused or f"database error: {first_line(exc)}")) from None


def _not_text(args: Sequence[str]) -> str | None:
    """What holds bytes that are not UTF-8 text, among the arguments and the
    environment variables subs reads: Python keeps such bytes as surrogates,
    which no name, condition, path or password sent to Firebird can hold."""
    for arg in args:
        if not _is_text(arg):
            return (
                f"argument {arg!r} holds bytes that are not UTF-8 text (a terminal set to another encoding?); "
                "type it in UTF-8"
            )
    for name, value in os.environ.items():
        if name.startswith(("SUBS_", "ISC_")) and not _is_text(value):  # not shown: it may be a password
            return f"environment variable {name} holds bytes that are not UTF-8 text; set it in UTF-8"
    return None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Seconds(click.FloatRange):
    """Seconds within a range. NaN compares false with both bounds, so a
    plain FloatRange let `--poll nan` through (and the listener hung)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return number


@dataclass(frozen=True)
class App:
    """What the global options resolved to."""

    settings: ConnectionSettings
    config: FileConfig
    config_path: str | None


def app(ctx: click.Context) -> App:
    found = ctx.find_object(App)
    if found is None:
        raise RuntimeError("the subs group did not run before its command")
    return found


def open_database(ctx: click.Context, *, create: bool = False, current: bool = True) -> Database:
    """Attach to the database named by the global options; closed when the command ends."""
    db = Database(app(ctx).settings, create=create, lock_wait=LOCK_WAIT)
    ctx.call_on_close(db.close)
    if stopping.requested():  # noted while the driver attached, before the engine could be shut down on it
        raise Terminated
    if current:
        require_current(db)
    return db


@click.group(cls=SubsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-d",
    "--database",
    envvar="SUBS_DATABASE",
    help="A file path (embedded Firebird 5) or host[/port]:path / inet://host:port/path "
    f"(Firebird server). Env: SUBS_DATABASE. [default: {DEFAULT_DATABASE}]",
)
@click.option("--user", envvar="ISC_USER", help="Firebird user [default: SYSDBA]. Env: ISC_USER.")
@click.option(
    "--password",
    envvar="ISC_PASSWORD",
    help="Firebird password. Prefer the ISC_PASSWORD environment variable or the config file.",
)
@click.option(
    "--role",
    envvar="SUBS_ROLE",
    help="SQL role to take rights from (see `subs grant --to-role`). Env: SUBS_ROLE.",
)
@click.option(
    "--config",
    "config_path",
    envvar=CONFIG_ENV,
    help=f"Config file (TOML) [default: ./subs.toml if present]. Env: {CONFIG_ENV}.",
)
@click.version_option(__version__, prog_name="subs")
@click.pass_context
def cli(
    ctx: click.Context,
    database: str | None,
    user: str | None,
    password: str | None,
    role: str | None,
    config_path: str | None,
) -> None:
    """Table subscriptions for Firebird: triggers log row changes, handlers act on them."""
    config = load_config(config_path)
    for note in (config.note, unknown_variables_note()):
        if note:
            click.echo(f"note: {note}", err=True)
    role = role or config.database.get("role")
    settings = ConnectionSettings(
        database or config.database.get("dsn") or DEFAULT_DATABASE,
        user or config.database.get("user"),
        password or config.database.get("password"),
        stored_name(role, "role") if role else None,
    )
    refuse_terminal_stop(settings, say=lambda text: click.echo(text, err=True))
    ctx.obj = App(settings, config, config_path)


def main() -> None:
    """The ``subs`` program. A process it spawns (the listener's claimer and
    handler processes) runs the parent's main module again unless that was
    run with ``-m``: the ``subs`` script's would load the whole command line
    into every handler process (11 MB more each). Named as ``python -m
    subscriptions``'s module, it is left alone by multiprocessing. Its exit
    waits for the engine's shutdown only so long (``stopping.leave``); not
    a command's under CliRunner, whose process goes on using the engine."""
    program = sys.modules["__main__"]
    if program.__spec__ is None:
        program.__spec__ = importlib.util.find_spec("subscriptions.__main__")
    try:
        cli(prog_name="subs")
    except SystemExit as exiting:
        leave(exiting.code if isinstance(exiting.code, int) else int(exiting.code is not None))
        raise


from . import backfill, listen, manage, monitor, web  # noqa: E402,F401  (commands register themselves)
