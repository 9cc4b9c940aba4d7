"""The format in which triggers capture a row's key and values, both ways:
PSQL expressions that write it (used by the trigger generator) and the
Python decoder that turns it back into typed values.

A captured row is a sequence of columns, each::

    <name length>:<name><type letter>[<value length>:<value text>]

Lengths count characters, so no value ever needs escaping, and PSQL can build
it with plain concatenation. The type letter says how to read the text back;
``n`` is NULL and has no value part.

Not captured: binary BLOBs and binary strings (CHARACTER SET OCTETS) other
than 16-byte ones, which are captured as UUID-shaped bytes. Text BLOBs are.
"""

from __future__ import annotations

import datetime as dt
import uuid
import zoneinfo
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from subscriptions.db.sql import literal, quote

from .metadata import Column

SMALLINT, INTEGER, QUAD, FLOAT, DATE, TIME, CHAR, BIGINT = 7, 8, 9, 10, 12, 13, 14, 16
BOOLEAN, DECFLOAT16, DECFLOAT34, INT128, DOUBLE = 23, 24, 25, 26, 27
TIME_TZ, TIMESTAMP_TZ, TIMESTAMP, VARCHAR, BLOB = 28, 29, 35, 37, 261
OCTETS = 1
TEXT_BLOB = 1

# Above this many bytes a VARCHAR concatenation could overflow Firebird's
# 32,765-byte string limit, so the expression is built as a text BLOB instead.
_MAX_VARCHAR_BYTES = 32000
_EMPTY_TEXT_BLOB = "CAST('' AS BLOB SUB_TYPE TEXT CHARACTER SET UTF8)"


def _kind(column: Column) -> tuple[str, int] | None:
    """(type letter, max text length) of a column, or None if it is not captured."""
    field_type = column.field_type
    if field_type in (SMALLINT, INTEGER, BIGINT, INT128, QUAD):
        if column.scale < 0:
            return "d", 48
        return "i", 42
    if field_type in (DECFLOAT16, DECFLOAT34):
        return "d", 48
    if field_type in (FLOAT, DOUBLE):
        return "f", 32
    if field_type == BOOLEAN:
        return "b", 5
    if field_type == DATE:
        return "D", 12
    if field_type == TIME:
        return "T", 16
    if field_type == TIMESTAMP:
        return "S", 28
    if field_type == TIME_TZ:
        return "z", 80
    if field_type == TIMESTAMP_TZ:
        return "Z", 96
    if field_type in (CHAR, VARCHAR):
        if column.charset_id == OCTETS:
            return ("u", 36) if column.byte_length == 16 else None
        return "s", column.char_length or column.byte_length
    if field_type == BLOB and column.sub_type == TEXT_BLOB:
        return "s", 0
    return None


def is_captured(column: Column) -> bool:
    return _kind(column) is not None


def _value_text(column: Column, context: str) -> str:
    letter, length = _captured_kind(column)
    ref = f"{context}.{quote(column.name)}"
    if column.field_type == BLOB:
        return ref
    if letter == "u":
        return f"UUID_TO_CHAR({ref})"
    return f"CAST({ref} AS VARCHAR({max(length, 1)}) CHARACTER SET UTF8)"


def row_expression(columns: tuple[Column, ...], context: str) -> str:
    """A PSQL expression capturing ``columns`` of the NEW or OLD row."""
    parts = []
    total_bytes = 0
    has_blob = False
    for column in columns:
        kind = _kind(column)
        if kind is None:
            continue
        letter, length = kind
        has_blob = has_blob or column.field_type == BLOB
        total_bytes += 4 * (length + len(column.name) + 16)
        text = _value_text(column, context)
        header = literal(f"{len(column.name)}:{column.name}")
        parts.append(
            f"{header} || IIF({context}.{quote(column.name)} IS NULL, 'n', "
            f"'{letter}' || CHAR_LENGTH({text}) || ':' || {text})"
        )
    if not parts:
        return "''"
    if total_bytes > _MAX_VARCHAR_BYTES and not has_blob:
        parts.insert(0, _EMPTY_TEXT_BLOB)
    return "\n        || ".join(parts)


def key_capacity(columns: tuple[Column, ...]) -> int:
    """Longest key text a primary key of ``columns`` can produce, in characters."""
    return sum(len(str(len(c.name))) + len(c.name) + 8 + _captured_kind(c)[1] for c in columns)


def _captured_kind(column: Column) -> tuple[str, int]:
    kind = _kind(column)
    if kind is None:
        raise ValueError(f"column {column.name} is not captured")
    return kind


def _timestamp_tz(text: str) -> dt.datetime:
    stamp, _, zone = text.rpartition(" ")
    return dt.datetime.fromisoformat(stamp).replace(tzinfo=_zone(zone))


def _time_tz(text: str) -> dt.time:
    clock, _, zone = text.rpartition(" ")
    return dt.time.fromisoformat(clock).replace(tzinfo=_zone(zone))


def _zone(name: str) -> dt.tzinfo:
    if name[:1] in "+-":
        hours, _, minutes = name[1:].partition(":")
        offset = dt.timedelta(hours=int(hours), minutes=int(minutes or 0))
        return dt.timezone(-offset if name[0] == "-" else offset)
    return zoneinfo.ZoneInfo(name)


_READERS: dict[str, Callable[[str], Any]] = {
    "i": int,
    "d": Decimal,
    "f": float,
    "s": str,
    "b": lambda text: text.upper() == "TRUE",
    "D": dt.date.fromisoformat,
    "T": dt.time.fromisoformat,
    "S": dt.datetime.fromisoformat,
    "z": _time_tz,
    "Z": _timestamp_tz,
    "u": lambda text: uuid.UUID(text).bytes,
}


def decode(text: str | None) -> dict[str, Any] | None:
    """Turn captured text back into ``{column: typed value}``; None stays None."""
    if text is None:
        return None
    values: dict[str, Any] = {}
    position = 0

    def read_counted() -> str:
        nonlocal position
        colon = text.index(":", position)
        length = int(text[position:colon])
        start = colon + 1
        position = start + length
        return text[start:position]

    while position < len(text):
        name = read_counted()
        letter = text[position]
        position += 1
        values[name] = None if letter == "n" else _READERS[letter](read_counted())
    return values
