"""``subs.toml``: the ``[database]`` table and one ``[handlers.TAG]`` table per
tag, with ``SUBS__<TAG>__<KEY>`` environment overrides, and the helpers
handler plugins use to check their settings."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import urllib.parse
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subscriptions.errors import SubsError

CONFIG_ENV = "SUBS_CONFIG"
# The longest time in seconds a setting or option may name: longer ones only
# break later (a lease or a retry time past the last timestamp crash-looped
# the claimer; a socket refuses such a timeout), and none is useful.
MAX_SECONDS = 86_400.0
DEFAULT_CONFIG = "subs.toml"
_ENV_OVERRIDE = re.compile(r"^SUBS__(?P<tag>[A-Z0-9_.-]+)__(?P<key>[A-Z0-9_]+)$")
# The SUBS_ environment variables subs reads besides SUBS__<TAG>__<KEY> (a
# test checks that every option's is here). Any other, except the exec
# handler's EVENT_VARIABLES (its command may run subs), is named in a note:
# a misspelt one (SUBS_DATABSE, SUBS__SEND_EMAIL_PASSWORD) is ignored.
ENVIRONMENT = frozenset(
    {CONFIG_ENV, "SUBS_DATABASE", "SUBS_ROLE", "SUBS_PLUGINS", "SUBS_WEB_TOKEN", "SUBS_RUNTIME_DIR"}
)
# The event's identity, in an exec command's environment.
EVENT_VARIABLES = ("SUBS_EVENT_ID", "SUBS_IDEMPOTENCY_KEY", "SUBS_TABLE", "SUBS_ACTION", "SUBS_TAG", "SUBS_ATTEMPT")


@dataclass(frozen=True)
class FileConfig:
    """What ``subs.toml`` says: ``[database]`` and one ``[handlers.TAG]`` table per tag."""

    database: dict[str, Any] = field(default_factory=dict, repr=False)
    handlers: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str | None = None  # for the user: the file shows its secrets to other users


DATABASE_KEYS = {"dsn", "user", "password", "role"}
_SECRET_KEY = re.compile(r"password|passwd|secret|token|authorization|api_?key", re.IGNORECASE)
_PASSWORD_IN_URL = re.compile(r"://[^/@\s:]*:[^/@\s]+@")


def load_config(path: str | None, environ: Mapping[str, str] = os.environ) -> FileConfig:
    """Read the config file (``path``, else ./subs.toml if present) and apply
    ``SUBS__<TAG>__<KEY>=value`` environment overrides to handler tables.

    An explicitly named file must exist; a malformed file is an error naming it.
    """
    explicit = path is not None
    file = Path(path or DEFAULT_CONFIG)
    data: dict[str, Any] = {}
    if file.is_file():
        try:
            data = tomllib.loads(file.read_text("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SubsError(f"config file {file} is not valid TOML: {exc}") from None
        except OSError as exc:
            raise SubsError(f"config file {file} cannot be read: {exc.strerror}; check its permissions") from None
    elif file.exists():
        raise SubsError(f"config file {file} is not a file; check --config/{CONFIG_ENV}")
    elif explicit:
        raise SubsError(f"config file {file} does not exist; check --config/{CONFIG_ENV}")
    unknown = set(data) - {"database", "handlers"}
    if unknown:
        raise SubsError(
            f"config file {file}: unknown section(s) {', '.join(sorted(unknown))}; use [database] and [handlers.TAG]"
        )
    handlers = data.get("handlers", {})
    if not isinstance(handlers, dict) or not all(isinstance(v, dict) for v in handlers.values()):
        raise SubsError(f"config file {file}: [handlers] must hold one table per tag, e.g. [handlers.webhook]")
    handlers = {tag: dict(table) for tag, table in handlers.items()}
    for name, value in environ.items():
        match = _ENV_OVERRIDE.match(name)
        if match:
            tag = next((t for t in handlers if t.upper() == match["tag"]), match["tag"].lower())
            handlers.setdefault(tag, {})[match["key"].lower()] = value
    return FileConfig(_database_table(file, data.get("database", {})), handlers, _exposed_secrets_note(file, data))


def unknown_variables_note(environ: Mapping[str, str] = os.environ) -> str | None:
    """A note naming the SUBS_ environment variables subs does not read,
    each with the name it is closest to."""
    known = ENVIRONMENT.union(EVENT_VARIABLES)
    unknown = sorted(name for name in environ if name.startswith("SUBS_") and name not in known)
    unknown = [name for name in unknown if not _ENV_OVERRIDE.match(name)]
    if not unknown:
        return None
    shown = [
        f"{name} ({close[0]}?)" if (close := difflib.get_close_matches(name, sorted(ENVIRONMENT), 1, 0.8)) else name
        for name in unknown
    ]
    return (
        f"subs ignores the environment variable(s) {', '.join(shown)}: it reads "
        f"{', '.join(sorted(ENVIRONMENT))} and SUBS__<TAG>__<KEY> for a handler's setting"
    )


def _exposed_secrets_note(file: Path, data: Mapping[str, Any]) -> str | None:
    """A note when other users can read a file that holds secrets (a
    password, a webhook's secret, a token, a URL with a password), as ssh
    and libpq give for theirs; a note, not a refusal, so that no listener
    stops over it."""
    mode = file.stat().st_mode & 0o777 if data else 0
    found = [f"[{'.'.join(path[:-1])}] {path[-1]}" for path in _secrets(data, ())] if mode & 0o004 else []
    if not found:
        return None
    return (
        f"config file {file} holds secrets ({', '.join(found)}) that other users can read (mode {mode:o}); "
        f"make it private: chmod o-rwx {file}"
    )


def _secrets(value: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The key paths of the secrets in ``value``, a TOML document or part of one."""
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _secrets(item, (*path, str(key)))]
    if isinstance(value, list):
        return [path] if any(_secrets(item, path) for item in value) else []
    if _SECRET_KEY.search(path[-1]) and value != "":
        return [path]
    return [path] if isinstance(value, str) and _PASSWORD_IN_URL.search(value) else []


def _database_table(file: Path, table: Any) -> dict[str, str]:
    if not isinstance(table, dict):
        raise SubsError(f"config file {file}: [database] must be a table with dsn, user, password, role")
    unknown = set(table) - DATABASE_KEYS
    if unknown:
        raise SubsError(
            f"config file {file}: unknown [database] key(s) {', '.join(sorted(unknown))}; "
            f"use {', '.join(sorted(DATABASE_KEYS))}"
        )
    for key, value in table.items():
        if not isinstance(value, str):
            raise SubsError(f"config file {file}: [database] {key} must be a string")
    return dict(table)


def tables_using(handler: str, config: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The ``[handlers.TAG]`` tables served by ``handler``: its own and its aliases'
    (``use = "handler"``), so a plugin can check them all at start-up. Its own
    table is not among them when it sends that tag to another handler."""
    return {tag: table for tag, table in config.items() if table.get("use", tag) == handler}


def check_setting_names(tag: str, settings: Mapping[str, Any], handler: str, known: Collection[str]) -> None:
    """Refuse a key ``handler`` does not read in ``[handlers.TAG]``: a misspelt
    one (``timout``, ``secert``) would otherwise be ignored in silence, and
    the handler would run on its default (unsigned, for a webhook's secret)."""
    unknown = sorted(set(settings) - set(known) - {"use"})
    if unknown:
        raise SubsError(
            f"[handlers.{tag}] has no setting {', '.join(unknown)} ({handler} reads {', '.join(sorted(known))}); "
            f"check its spelling in subs.toml or in SUBS__{tag.upper()}__* environment variables"
        )


def positive_setting(
    tag: str, settings: Mapping[str, Any], key: str, default: float, kind: type = float, maximum: float = MAX_SECONDS
) -> Any:
    """A positive int or float handler setting up to ``maximum`` (environment
    overrides arrive as strings)."""
    try:
        value = kind(settings.get(key, default))
    except (TypeError, ValueError):
        value = 0
    if not 0 < value <= maximum:
        raise SubsError(
            f"[handlers.{tag}] {key} must be a positive number up to {maximum:g}, not {settings.get(key)!r}"
        )
    return value


def url_setting(tag: str, url: str, schemes: tuple[str, ...]) -> urllib.parse.SplitResult:
    """A handler's ``url``: one of ``schemes``, a host, and a port a socket
    can take, refused at start-up rather than failing every event. The URL
    is never quoted back: it may carry a password."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in schemes:
        raise SubsError(f"[handlers.{tag}] url must start with {' or '.join(scheme + '://' for scheme in schemes)}")
    if not parts.hostname:
        raise SubsError(f"[handlers.{tag}] url names no host; write {schemes[0]}://HOST...")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise SubsError(f"[handlers.{tag}] url has a port that is not a number from 1 to 65535")
    return parts
