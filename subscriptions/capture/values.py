"""Reading captured rows (PK_ROW, OLD_ROW, NEW_ROW) back into typed
values, equal to what firebird-driver returns when it selects the column.

The capture trigger (generated in the database, sql/capture.sql) writes a
row as bytes: ``~`` then, per column, ``<n>:<name><n>:<type>`` and either
``-`` (NULL), ``<n>:<value>``, where ``<n>`` counts bytes, or ``=<value>;``
(since schema version 18, for the types whose text never holds a ``;``:
counting a value costs the trigger its expression twice), or ``><n>:``
(since version 26, in row images built by concatenation): a BLOB's value
of ``<n>`` bytes, which follows the last column's part and a ``^``, after
the values of the BLOBs before it (a concatenation copies what it appends
to). The type travels with every value, so an event decodes as it was
captured, whatever DDL came after. Rows captured before schema version 8
are UTF-8 text without the leading ``~`` and with character counts; they
decode too.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .charsets import decode_text
from .zones import zone

FORMAT_MARK = b"~"
BLOBS_MARK = b"^"


class UndecodableEvent(ValueError):
    """A captured row that cannot be read: its event fails instead of its worker."""


def _timestamp_tz(text: str) -> dt.datetime:
    stamp, _, zone_name = text.rpartition(" ")
    return dt.datetime.fromisoformat(stamp).replace(tzinfo=zone(zone_name))


def _time_tz(text: str) -> dt.time:
    clock, _, zone_name = text.rpartition(" ")
    return dt.time.fromisoformat(clock).replace(tzinfo=zone(zone_name))


def _binary_float(text: str) -> float:
    """``<integer>p<exponent>``: the float's exact value, integer * 2**exponent;
    else decimal digits that round to it (17 significant ones), or ``nan``,
    ``inf``, ``-inf``, ``0`` and ``-0`` as Python spells them."""
    mantissa, exponent_mark, exponent = text.partition("p")
    if not exponent_mark:
        return float(text)
    return math.ldexp(int(mantissa), int(exponent))


_TEXT_READERS: dict[str, Callable[[str], Any]] = {
    "i": int,
    "N": Decimal,
    "f": _binary_float,
    "b": lambda text: text.upper() == "TRUE",
    "D": dt.date.fromisoformat,
    "T": dt.time.fromisoformat,
    "S": dt.datetime.fromisoformat,
    "z": _time_tz,
    "Z": _timestamp_tz,
}


def _value(type_code: str, data: bytes) -> Any:
    if type_code == "x":
        return data
    if type_code.startswith("s"):
        return decode_text(data, type_code[1:])
    return _TEXT_READERS[type_code](data.decode("ascii"))


def decode(data: bytes | str | None) -> dict[str, Any] | None:
    """A captured row as ``{column: typed value}``; None stays None. Raises
    UndecodableEvent, never anything else, for data it cannot read."""
    if data is None:
        return None
    try:
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not data.startswith(FORMAT_MARK):
            return _decode_legacy(data.decode("utf-8"))
        return _decode(data)
    except Exception as exc:
        raise UndecodableEvent(f"cannot decode the captured row: {type(exc).__name__}: {exc}") from exc


def _decode(data: bytes) -> dict[str, Any]:
    values: dict[str, Any] = {}
    position = len(FORMAT_MARK)

    def counted() -> bytes:
        nonlocal position
        colon = data.index(b":", position)
        start = colon + 1
        position = start + int(data[position:colon])
        if position > len(data):
            raise ValueError("a value runs past the end of the row")
        return data[start:position]

    def delimited() -> bytes:
        nonlocal position
        start = position + 1
        position = data.index(b";", start) + 1
        return data[start : position - 1]

    following: list[tuple[str, str, int]] = []  # BLOB values after the BLOBS_MARK: name, type, length
    while position < len(data):
        if data[position : position + 1] == BLOBS_MARK:
            position += 1
            break
        name = counted().decode("utf-8")
        type_code = counted().decode("ascii")
        mark = data[position : position + 1]
        if mark == b"-":
            position += 1
            values[name] = None
        elif mark == b"=":
            values[name] = _value(type_code, delimited())
        elif mark == b">":
            position += 1
            colon = data.index(b":", position)
            following.append((name, type_code, int(data[position:colon])))
            position = colon + 1
            values[name] = None  # keeps the column's place; its value follows
        else:
            values[name] = _value(type_code, counted())
    for name, type_code, length in following:
        if position + length > len(data):
            raise ValueError("a BLOB's value runs past the end of the row")
        values[name] = _value(type_code, data[position : position + length])
        position += length
    if position != len(data):
        raise ValueError(f"{len(data) - position} byte(s) after the last value")
    return values


_LEGACY_READERS: dict[str, Callable[[str], Any]] = {
    **_TEXT_READERS,
    "d": Decimal,
    "f": float,
    "s": str,
    "u": lambda text: uuid.UUID(text).bytes,
}


def _decode_legacy(text: str) -> dict[str, Any]:
    """The text format of schema versions up to 7 (lengths in characters,
    ``n`` for NULL)."""
    values: dict[str, Any] = {}
    position = 0

    def counted() -> str:
        nonlocal position
        colon = text.index(":", position)
        start = colon + 1
        position = start + int(text[position:colon])
        return text[start:position]

    while position < len(text):
        name = counted()
        letter = text[position]
        position += 1
        values[name] = None if letter == "n" else _LEGACY_READERS[letter](counted())
    return values
