"""The event a handler receives: one row of EVENT_LOG, decoded."""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any


@dataclass
class Event:
    """One change of one row, for one subscription.

    ``pk``, ``old`` and ``new`` map column names to typed values; ``old`` is
    None for inserts and ``new`` is None for deletes. ``attempt`` is 1 on the
    first delivery. ``cursor`` is only set for transactional handlers.
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
    cursor: Any = field(default=None, repr=False, compare=False)

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
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), default=json_default, ensure_ascii=False)


def json_default(value: Any) -> Any:
    """JSON for captured values: Decimal as a string (exact), times as ISO 8601,
    bytes as base64."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
