"""Tag ``exec``: runs a command with each event as JSON on its standard input.

Settings (``[handlers.exec]`` in subs.toml, or ``SUBS__EXEC__<KEY>``):

``command`` (required)
    A list of strings, e.g. ``["/usr/local/bin/on-change", "--verbose"]``, or
    one string split like a shell would split it. It is never run through a
    shell: use ``["sh", "-c", "..."]`` for pipes or redirections. The
    program must be there when the listener starts: found on the ``PATH``
    the command gets, or by its path (from ``cwd`` when relative).
``timeout``
    Seconds the command may run (default 30); then it and everything it
    started are killed.
``cwd``
    The working directory of the command (default: the listener's); it
    must exist when the listener starts.
``env``
    A table of environment variables to give the command, e.g.
    ``env = { API_TOKEN = "..." }``; not the event's own ``SUBS_...`` ones.

The command gets the listener's environment without what may hold subs's
secrets (``ISC_PASSWORD`` and every ``SUBS_...`` variable, such as
``SUBS__WEBHOOK__SECRET``), plus ``env`` and the event's ``SUBS_EVENT_ID``,
``SUBS_IDEMPOTENCY_KEY``, ``SUBS_TABLE``, ``SUBS_ACTION``, ``SUBS_TAG`` and
``SUBS_ATTEMPT``, so a script can route on them without reading the JSON.

Exit status 0 is a delivery; any other status or a timeout is a failure,
retried later, reported with the end of the command's standard error. The
command's standard output is discarded.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from subscriptions import hookimpl
from subscriptions.config import EVENT_VARIABLES, check_setting_names, positive_setting, tables_using
from subscriptions.errors import SubsError
from subscriptions.events import Event

SETTINGS = ("command", "timeout", "cwd", "env")
DEFAULT_TIMEOUT = 30.0
STDERR_TAIL = 200


def _command(tag: str, settings: Mapping[str, Any]) -> list[str]:
    value = settings.get("command")
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as exc:
            raise SubsError(f"[handlers.{tag}] command cannot be split: {exc}") from None
    if not value or not isinstance(value, list):
        raise SubsError(
            f'handler {tag!r} has no command: set [handlers.{tag}] command = ["/path/to/program", "arg"] '
            f"in subs.toml or the environment variable SUBS__{tag.upper()}__COMMAND"
        )
    return [_text(tag, f"command word {place}", part) for place, part in enumerate(value, 1)]


def _text(tag: str, where: str, value: object) -> str:
    """A command word or environment value as the OS takes it: text (or a
    number), without a NUL byte, or Popen fails every attempt. Not shown:
    an environment value may be a secret."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SubsError(f"[handlers.{tag}] {where} must be text, not {type(value).__name__}")
    if "\0" in str(value):
        raise SubsError(f"[handlers.{tag}] {where} holds a NUL byte, which no program can be given")
    return str(value)


def _extra_environment(tag: str, settings: Mapping[str, Any]) -> dict[str, str]:
    value = settings.get("env", {})
    if not isinstance(value, Mapping):
        raise SubsError(f'[handlers.{tag}] env must be a table, e.g. env = {{ API_TOKEN = "..." }}')
    for name in value:
        if not name or "=" in name or "\0" in name:
            raise SubsError(f"[handlers.{tag}] env: {name!r} is not a variable name; leave out '=' and NUL")
        if name in EVENT_VARIABLES:
            raise SubsError(f"[handlers.{tag}] env: {name} is set by subs to the event's; choose another name")
    return {name: _text(tag, f"env {name}", text) for name, text in value.items()}


def _check_program(tag: str, command: list[str], settings: Mapping[str, Any]) -> None:
    """The folder and the program are there at start-up: a typo in either
    is one error then, not a failed attempt per event."""
    cwd = settings.get("cwd") or None
    if cwd is not None and not os.path.isdir(str(cwd)):
        raise SubsError(f"[handlers.{tag}] cwd {cwd}: there is no such folder")
    program = command[0]
    if "/" in program:
        found = os.path.join(str(cwd or "."), program)
        if not (os.path.isfile(found) and os.access(found, os.X_OK)):
            raise SubsError(f"[handlers.{tag}] command: {program} is not a program this user may run")
    elif shutil.which(program, path=os.pathsep.join(os.get_exec_path(_inherited(tag, settings)))) is None:
        raise SubsError(f"[handlers.{tag}] command: there is no program {program} on the PATH; give its full path")


def _inherited(tag: str, settings: Mapping[str, Any]) -> dict[str, str]:
    """The listener's environment without subs's secrets (the database
    password, the SUBS_ settings), with the configured ``env``."""
    inherited = {
        name: value for name, value in os.environ.items() if name != "ISC_PASSWORD" and not name.startswith("SUBS_")
    }
    return {**inherited, **_extra_environment(tag, settings)}


def _environment(event: Event, settings: Mapping[str, Any]) -> dict[str, str]:
    """What the command runs with: the environment it inherits and the
    event's identity."""
    identity = (event.id, event.idempotency_key, event.table, event.action, event.tag, event.attempt)
    return {**_inherited(event.tag, settings), **dict(zip(EVENT_VARIABLES, map(str, identity), strict=True))}


def run(event: Event, settings: Mapping[str, Any]) -> None:
    """Run the command on the event; raise unless it exits 0 within the timeout."""
    command = _command(event.tag, settings)
    timeout = positive_setting(event.tag, settings, "timeout", DEFAULT_TIMEOUT)
    cwd = settings.get("cwd") or None
    try:
        # A session of its own, so a timeout kills the command's children too.
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=_environment(event, settings),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise SubsError(f"[handlers.{event.tag}] cannot run {command[0]!r}: {exc.strerror or exc}") from None
    with process:
        try:
            _, stderr = process.communicate(event.to_json().encode("utf-8"), timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise RuntimeError(f"exec {command[0]}: killed after {timeout:g} s") from None
    if process.returncode != 0:
        tail = stderr.decode("utf-8", errors="replace").strip()[-STDERR_TAIL:]
        status = (
            f"killed by signal {-process.returncode}" if process.returncode < 0 else f"exit status {process.returncode}"
        )
        raise RuntimeError(f"exec {command[0]}: {status}" + (f": {tail}" if tail else ""))


@hookimpl
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, settings in tables_using("exec", config).items():
        check_setting_names(tag, settings, "exec", SETTINGS)
        # A missing command or program is a start-up error, not a retried failure.
        _check_program(tag, _command(tag, settings), settings)
        _extra_environment(tag, settings)
        positive_setting(tag, settings, "timeout", DEFAULT_TIMEOUT)
    register("exec", lambda event: run(event, config.get(event.tag, {})))
