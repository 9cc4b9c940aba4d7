"""A row's captured key from the typed values of its table's key columns:
what finds every logged event of one row through EVENT_LOG's key index
(sql/keys.sql)."""

from __future__ import annotations

from collections.abc import Sequence

from firebird.driver import Cursor, DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import read_text
from subscriptions.db.errors import first_line
from subscriptions.errors import SubsError

from .metadata import load_table


def key_block(table: str, key_columns: Sequence[str], insert_key: str) -> str:
    """The statement that captures one key of ``table``: one text parameter
    per key column, cast to the column's type."""
    quoted = sql.quote(table)
    inputs = ", ".join(f"K{n} VARCHAR(8191) CHARACTER SET UTF8 = ?" for n in range(len(key_columns)))
    casts = ", ".join(
        f"CAST(:K{n} AS TYPE OF COLUMN {quoted}.{sql.quote(column)}) AS {sql.quote(column)}"
        for n, column in enumerate(key_columns)
    )
    statement = sql.load("keys")["key_block"]
    return statement.replace("{inputs}", inputs).replace("{casts}", casts).replace("{insert_key}", insert_key)


def row_key(cursor: Cursor, table_typed: str, values: Sequence[str]) -> tuple[str, bytes]:
    """The table's catalogue name and the captured key of the row whose key
    columns hold ``values`` (as typed, in the primary key's column order)."""
    table = load_table(cursor, table_typed)
    if len(values) != len(table.primary_key):
        raise SubsError(
            f"the key of {table.name} is {', '.join(table.primary_key)}: give {len(table.primary_key)} "
            f"value(s), not {len(values)}"
        )
    statements = sql.load("keys")
    cursor.execute(statements["insert_key"], (table.name,))
    reason, insert_key = cursor.fetchone()
    if insert_key is None:
        raise SubsError(f"rows of {table.name} cannot be found by key: {reason}")
    try:
        cursor.execute(key_block(table.name, table.primary_key, read_text(insert_key) or ""), tuple(values))
        return table.name, bytes(cursor.fetchone()[0])
    except DatabaseError as exc:
        reason = first_line(exc).split(";")[0]  # without the block's line and column
        raise SubsError(
            f"{', '.join(values)} is not a key of {table.name} ({', '.join(table.primary_key)}): {reason}"
        ) from None


def key_hash(cursor: Cursor, table: str, tag: str, captured_key: bytes) -> int:
    """KEY_HASH of the row's events of ``tag``, as the trigger computes it."""
    cursor.execute(sql.load("keys")["key_hash"], (f"{table}|{tag}|".encode() + captured_key,))
    return int(cursor.fetchone()[0])
