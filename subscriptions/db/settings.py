"""Where the database is and who we are on it.

A plain path is a database opened by the embedded engine; ``host:path``,
``host/port:path`` and ``inet://host:port/path`` go to a Firebird server over
the wire.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from subscriptions.errors import SubsError

DEFAULT_DATABASE = "subs.fdb"
DEFAULT_USER = "SYSDBA"
MAX_NAME_CHARS = 63
_UNQUOTED = re.compile(r"[A-Za-z][A-Za-z0-9_$]*")
_QUOTED = re.compile(r'"((?:[^"]|"")+)"')

# host[/port]:path, where host has no slash (so "./a:b.fdb" stays a path).
_LEGACY_REMOTE = re.compile(r"^[A-Za-z0-9_.\-\[\]]+(/[A-Za-z0-9_]+)?:.+")
_URL_REMOTE = re.compile(r"^(inet|inet4|inet6|wnet|xnet)://", re.IGNORECASE)


@dataclass(frozen=True)
class ConnectionSettings:
    """A DSN plus credentials. The password never shows up in ``repr``.
    ``role``, a role's name as the catalogue holds it (``stored_name``), is
    the SQL role the attachment takes its rights from."""

    dsn: str = DEFAULT_DATABASE
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    role: str | None = None

    @property
    def is_remote(self) -> bool:
        return bool(_URL_REMOTE.match(self.dsn) or _LEGACY_REMOTE.match(self.dsn))

    @property
    def target(self) -> str:
        """What the driver attaches to: remote DSNs as given, local paths made
        absolute so every process (workers, detached listener) means one file."""
        if self.is_remote:
            return self.dsn
        return str(Path(self.dsn).expanduser().absolute())

    @property
    def effective_user(self) -> str:
        return self.user or DEFAULT_USER


def stored_name(typed: str, kind: str) -> str:
    """A user's or role's name (``kind``) as Firebird stores it: ``listener``
    is LISTENER, a name in double quotes is exact."""
    text = typed.strip()
    if _UNQUOTED.fullmatch(text):
        name = text.upper()
    elif quoted := _QUOTED.fullmatch(text):
        name = quoted.group(1).replace('""', '"')
    else:
        raise SubsError(
            f"{typed!r} is not a {kind} name: use letters, digits, _ and $ starting with a letter, "
            f'or put the exact name in double quotes ("app {kind}")'
        )
    if len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
        raise SubsError(f"{typed!r} is not a {kind} name: at most {MAX_NAME_CHARS} printable characters")
    return name
