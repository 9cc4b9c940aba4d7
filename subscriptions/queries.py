"""Named SQL blocks from the ``.sql`` files in ``sql/``.

A file holds blocks introduced by ``-- name: NAME`` lines; each block is one
statement (a trailing ``;`` is dropped, so PSQL bodies may end in ``END;``).
Blocks keep their file order, which schema migrations rely on.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>[\w/.-]+)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """Split a file's text into ``{name: statement}`` in file order."""
    blocks: dict[str, str] = {}
    matches = list(_NAME_LINE.finditer(text))
    for match, following in zip(matches, matches[1:] + [None]):
        end = following.start() if following else len(text)
        body = text[match.end() : end].strip()
        if body.endswith(";"):
            body = body[:-1].rstrip()
        name = match.group("name")
        if name in blocks:
            raise ValueError(f"duplicate SQL block name {name!r}")
        blocks[name] = body
    return blocks


@functools.cache
def load(file: str) -> dict[str, str]:
    """The blocks of ``sql/<file>.sql``, read once per process."""
    text = resources.files("subscriptions.sql").joinpath(f"{file}.sql").read_text("utf-8")
    return parse(text)
