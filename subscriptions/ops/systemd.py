"""A systemd unit running ``subs listen`` in the foreground."""

from __future__ import annotations

import math
import os
import re

_PLAIN_ARGUMENT = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
# Seconds a stopping listener gets beyond its handlers' --grace, to give
# back what it claimed and close its attachments before systemd kills it.
STOP_MARGIN = 30


def _quote(argument: str) -> str:
    """One ExecStart word, quoted the way systemd.service(5) unquotes it."""
    escaped = argument.replace("%", "%%").replace("$", "$$")
    if _PLAIN_ARGUMENT.fullmatch(argument):
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def _path_setting(value: str) -> str:
    """An absolute path for WorkingDirectory=/EnvironmentFile=, with % escaped."""
    if "\n" in value:
        raise ValueError(f"path {value!r} contains a newline")
    return os.path.abspath(value).replace("%", "%%")


def systemd_unit(
    *,
    executable: str,
    arguments: list[str],
    working_directory: str,
    environment_file: str,
    grace: float,
    user: str | None = None,
) -> str:
    """A systemd service running ``executable arguments`` in the foreground,
    stopped with SIGTERM and given ``grace`` (the listener's ``--grace``)
    plus STOP_MARGIN seconds before systemd kills it.

    Credentials belong in ``environment_file`` (ISC_USER, ISC_PASSWORD, ...):
    unit files are world-readable, so a ``--password`` argument is refused.
    """
    if any("--password" in argument for argument in arguments):
        raise ValueError("do not put --password in a unit file; set ISC_PASSWORD in the environment file")
    if not os.path.isabs(executable):
        raise ValueError(f"executable {executable!r} must be an absolute path")
    if user is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*", user):
        raise ValueError(f"invalid user name {user!r}")
    lines = [
        "[Unit]",
        "Description=subs listener",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(_quote(word) for word in [executable, *arguments]),
        f"WorkingDirectory={_path_setting(working_directory)}",
        f"EnvironmentFile=-{_path_setting(environment_file)}",
        *([f"User={user}"] if user else []),
        "Restart=on-failure",
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={math.ceil(grace) + STOP_MARGIN}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"
