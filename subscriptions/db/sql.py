"""SQL text: named blocks from the ``.sql`` files in ``sql/``, and the only
ways Python completes it.

A file holds blocks introduced by ``-- name: NAME`` lines; each block is one
statement (a trailing ``;`` is dropped, so PSQL bodies may end in ``END;``;
lines that are only a comment are dropped too).
Blocks keep their file order, which migrations rely on.

Python adds nothing to SQL text but:

- ``{{other}}``: another block of the same file, included when the file is
  read (so a list such as the claimed columns is written once);
- ``{name}``: an identifier, filled by ``with_identifiers`` through ``quote``;
- grants.sql's ``{grantee}``: ``USER`` or ``ROLE`` and a quoted name,
  filled by ``with_grantee``;
- ``?, ...``: a list of bound parameters, as long as ``with_parameters`` says;
- keys.sql's ``key_block``: capture/keys.py fills in quoted key columns and
  the key expression the capture generator (in the database) made.

Values always travel as bound parameters, lists of ids as one parameter
(``id_list``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from importlib import resources

_NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>[\w/.-]+)\s*$", re.MULTILINE)
_COMMENT_LINE = re.compile(r"^\s*--.*\n?", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{(?P<name>\w+)\}\}")
_IDENTIFIER = re.compile(r"\{(?P<name>\w+)\}")
PARAMETER_LIST = "?, ..."
GRANTEE_KINDS = ("USER", "ROLE")


def quote(name: str) -> str:
    """A catalogue name as a delimited SQL identifier: the one quoting function."""
    return '"' + name.replace('"', '""') + '"'


def parse(text: str) -> dict[str, str]:
    """Split a file's text into ``{name: statement}`` in file order, with
    ``{{name}}`` includes expanded."""
    blocks: dict[str, str] = {}
    matches = list(_NAME_LINE.finditer(text))
    for match, following in zip(matches, [*matches[1:], None]):
        end = following.start() if following else len(text)
        body = _COMMENT_LINE.sub("", text[match.end() : end]).strip()
        if body.endswith(";"):
            body = body[:-1].rstrip()
        name = match.group("name")
        if name in blocks:
            raise ValueError(f"duplicate SQL block name {name!r}")
        blocks[name] = body

    def expand(body: str) -> str:
        return _INCLUDE.sub(lambda found: expand(blocks[found.group("name")]), body)

    return {name: expand(body) for name, body in blocks.items()}


@functools.cache
def load(file: str) -> dict[str, str]:
    """The blocks of ``sql/<file>.sql``, read once per process."""
    text = resources.files("subscriptions.sql").joinpath(f"{file}.sql").read_text("utf-8")
    return parse(text)


def with_identifiers(statement: str, **names: str) -> str:
    """``statement`` with each ``{key}`` replaced by ``quote(names[key])``."""
    return _IDENTIFIER.sub(lambda found: quote(names[found.group("name")]), statement)


def with_grantee(statement: str, kind: str, name: str) -> str:
    """A GRANT ``statement`` with its ``{grantee}`` made ``kind`` (USER or
    ROLE) and the quoted ``name``."""
    if kind not in GRANTEE_KINDS:
        raise ValueError(f"a grantee is a USER or a ROLE, not {kind!r}")
    return statement.replace("{grantee}", f"{kind} {quote(name)}")


def id_list(ids: Iterable[int]) -> str:
    """Ids as the comma-separated list our PSQL blocks take in one
    parameter: binding a hundred parameters cost the client more than the
    engine's work."""
    return ",".join(str(int(value)) for value in ids)


def with_parameters(statement: str, count: int) -> str:
    """``statement`` with its ``?, ...`` list made ``count`` parameters long."""
    if count < 1 or PARAMETER_LIST not in statement:
        raise ValueError(f"cannot make a list of {count} parameters in {statement[:60]!r}")
    return statement.replace(PARAMETER_LIST, ", ".join("?" * count), 1)
