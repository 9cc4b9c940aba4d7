"""What the catalogue (RDB$ tables) says about a user's table."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.errors import SubsError

from .names import lookup_names

_CREATE_TABLE = re.compile(r"^\s*CREATE TABLE (\w+)", re.MULTILINE)
_TABLE = 0
_VIEW = 1
_EXTERNAL = 2


@dataclass(frozen=True)
class Column:
    name: str
    # False for ARRAY and COMPUTED BY columns, which events leave out.
    captured: bool = True


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    def column(self, name: str) -> Column:
        return next(column for column in self.columns if column.name == name)

    def resolve_column(self, typed: str) -> str:
        names = {column.name for column in self.columns}
        for candidate in lookup_names(typed):
            if candidate in names:
                if not self.column(candidate).captured:
                    raise SubsError(
                        f"column {candidate} of {self.name} is an ARRAY or COMPUTED BY column, which events "
                        "leave out; watch the columns it is computed from instead"
                    )
                return candidate
        raise SubsError(
            f"table {self.name} has no column {typed!r}; its columns are "
            + ", ".join(column.name for column in self.columns)
        )


@functools.cache
def own_tables() -> frozenset[str]:
    """The tables subs creates, read from the current schema: a table subs
    writes to must never be subscribed to (its trigger would feed itself)."""
    return frozenset(_CREATE_TABLE.findall("\n".join(sql.load("schema").values())))


def find_table(cursor: Cursor, typed: str) -> str | None:
    """The catalogue name of the ordinary user table ``typed`` names, if any."""
    statements = sql.load("metadata")
    for candidate in lookup_names(typed):
        cursor.execute(statements["relation"], (candidate,))
        row = cursor.fetchone()
        if row is None:
            continue
        name, relation_type, system_flag = row
        if system_flag:
            raise SubsError(f"{name} is a system table; subscribe to your own tables")
        if name in own_tables():
            raise SubsError(f"{name} is subs's own table and cannot be subscribed to")
        if relation_type == _VIEW:
            raise SubsError(f"{name} is a view; subscribe to the table(s) behind it")
        if relation_type == _EXTERNAL:
            raise SubsError(f"{name} is an external table; subs captures only tables stored in the database")
        if relation_type != _TABLE:
            raise SubsError(f"{name} is a temporary table; its changes are not visible to a listener")
        return str(name)
    return None


def load_table(cursor: Cursor, typed: str) -> Table:
    """Read a table's columns and primary key; refuse what we cannot subscribe to."""
    name = find_table(cursor, typed)
    if name is None:
        raise SubsError(
            f"table {typed!r} does not exist; check the name (write mixed-case names created with quotes as '\"Name\"')"
        )
    statements = sql.load("metadata")
    cursor.execute(statements["columns"], (name,))
    columns = tuple(Column(name, bool(captured)) for name, captured in cursor.fetchall())
    cursor.execute(statements["primary_key"], (name,))
    primary_key = tuple(row[0] for row in cursor.fetchall())
    if not primary_key:
        raise SubsError(
            f"table {name} has no primary key; events identify rows by it, so add one "
            "(ALTER TABLE ... ADD PRIMARY KEY) and try again"
        )
    return Table(name, columns, primary_key)
