"""A claimed event as its claim returned it: the captured values still
encoded. The claimer only needs its id, subscription, attempt and span; the
handler process that runs it decodes the values (capture/values.py), so
decoding runs beside the claims, in as many processes as there are."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from subscriptions.capture.values import UndecodableEvent, decode
from subscriptions.events import Event


@dataclass(frozen=True)
class Claimed:
    id: int
    table: str
    action: str
    tag: str
    subscription_id: int
    attempt: int
    created_at: dt.datetime
    database_id: str
    row_key: bytes | str | None
    old: bytes | str | None
    new: bytes | str | None
    span: int | None = None  # the EVENT_SPAN of a parallel claim

    @property
    def size(self) -> int:
        """The captured bytes it carries, as claims count them (max_claim_bytes)."""
        return len(self.old or b"") + len(self.new or b"")

    def event(self) -> tuple[Event, UndecodableEvent | None]:
        """The event for its handler; one whose captured row cannot be
        decoded comes without values, with the reason (its attempt fails)."""
        try:
            pk, old, new = decode(self.row_key) or {}, decode(self.old), decode(self.new)
            error = None
        except UndecodableEvent as exc:
            pk, old, new, error = {}, None, None, exc
        event = Event(
            id=self.id,
            table=self.table,
            action=self.action,
            tag=self.tag,
            pk=pk,
            old=old,
            new=new,
            attempt=self.attempt,
            created_at=self.created_at,
            subscription_id=self.subscription_id,
            database_id=self.database_id,
        )
        return event, error
