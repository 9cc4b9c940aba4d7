"""The event a handler receives: one row of EVENT_LOG, decoded."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

# EVENT_LOG.EVENT_ID is a BIGINT: a larger number names no event.
MAX_EVENT_ID = 2**63 - 1


@dataclass
class Event:
    """One change of one row, for one subscription.

    ``pk``, ``old`` and ``new`` map column names to typed values; ``old`` is
    None for inserts and ``new`` is None for deletes. ``attempt`` is 1 on the
    first delivery. ``database_id`` names the database the event comes from
    (see ``idempotency_key``). ``cursor`` is only set for transactional
    handlers.
    """

    id: int
    table: str
    action: str
    tag: str
    pk: dict[str, Any]
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    attempt: int
    created_at: dt.datetime
    subscription_id: int = 0
    database_id: str = ""
    cursor: Any = field(default=None, repr=False, compare=False)

    @property
    def idempotency_key(self) -> str:
        """Unique per event across databases and the same on every
        redelivery: what a receiver deduplicates by."""
        return f"{self.database_id}:{self.id}" if self.database_id else str(self.id)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what the webhook, exec and log handlers send)."""
        return {
            "id": self.id,
            "table": self.table,
            "action": self.action,
            "tag": self.tag,
            "pk": self.pk,
            "old": self.old,
            "new": self.new,
            "attempt": self.attempt,
            "created_at": self.created_at,
            "subscription_id": self.subscription_id,
            "database_id": self.database_id,
        }

    def to_json(self) -> str:
        return dumps(self.as_dict())


def dumps(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON, captured values in it encoded losslessly by
    ``_json_default``. Floats are numbers in their shortest exact form, but
    NaN and the infinities, which JSON has no number for, are the strings
    ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, as a Decimal's are
    (Python's own tokens for them would break other parsers). Values are
    walked for those only when the encoder meets one: the walk cost more
    than the encoding (relays encode every event)."""
    encoder = _COMPACT if indent is None else _encoder(indent)
    try:
        return encoder.encode(value)
    except ValueError:  # a float JSON has no number for
        return encoder.encode(_spelled_out(value))


def _spelled_out(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _spelled_out(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_spelled_out(item) for item in value]
    return value


def _json_default(value: Any) -> Any:
    """JSON for captured values, lossless: Decimal as a string of its digits,
    bytes as base64, dates and times as ISO 8601, with the zone's name in
    brackets after the offset when the value has a named zone (RFC 9557:
    ``2024-02-29T12:30:00+01:00[Europe/Prague]``)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.time)):
        # A region's name: the driver's tzinfo keeps it as _timezone_ (an
        # offset there is "+01:00"), zoneinfo's as key.
        zone = getattr(value.tzinfo, "_timezone_", None) or getattr(value.tzinfo, "key", None)
        named = zone is not None and zone[:1] not in "+-"
        return value.isoformat() + (f"[{zone}]" if named else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _encoder(indent: int | None) -> json.JSONEncoder:
    # Events hold no cycles: the check for them cost a relay about a tenth of
    # its encoding.
    return json.JSONEncoder(
        default=_json_default, ensure_ascii=False, allow_nan=False, check_circular=False, indent=indent
    )


_COMPACT = _encoder(None)
