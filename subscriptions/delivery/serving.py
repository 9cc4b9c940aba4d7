"""One stream, one mode: a listener refuses to start when a live worker of
another listener already consumes one of its tags in another mode (ordered,
parallel, parallel with --key-order), since mixed consumers would silently
break the order one of them promises. Each worker's attachment says what it
serves (a context variable, see sql/attachments.sql); a starting listener
reads the others' (and `subs status` shows them). Two listeners starting at
the same instant are not caught."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.errors import SubsError

from . import reaper
from .options import PARALLEL, ListenOptions

log = logging.getLogger("subs.listener")

ALL_TAGS = "*"


def mode_of(options: ListenOptions) -> str:
    return f"{PARALLEL} --key-order" if options.mode == PARALLEL and options.key_order else options.mode


def serves(options: ListenOptions) -> str:
    """``<mode>|<tag>,<tag>`` or ``<mode>|*`` for every tag."""
    return f"{mode_of(options)}|{','.join(sorted(options.tags)) or ALL_TAGS}"


@dataclass(frozen=True)
class Consumer:
    """A live listener as its attachments show it: its claimer (``host:pid``),
    mode, and tags (empty: every tag)."""

    owner: str
    mode: str
    tags: frozenset[str]

    def takes(self, tag: str) -> bool:
        return not self.tags or tag in self.tags


def sees_every_attachment(cursor: Cursor) -> bool:
    """Whether MON$ shows this attachment every attachment of the database,
    not only those of its own user: SYSDBA, the database's owner, RDB$ADMIN,
    and on Firebird 4 and later a role with MONITOR_ANY_ATTACHMENT."""
    before_4 = cursor.connection.info.engine_version < 4
    cursor.execute(sql.load("attachments")["sees_every_attachment" if before_4 else "sees_every_attachment_fb4"])
    return bool(cursor.fetchone()[0])


def consumers(cursor: Cursor) -> list[Consumer]:
    """The listeners whose attachments this one sees (all of them only where
    ``sees_every_attachment``), less those of this host whose process is gone."""
    cursor.execute(sql.load("attachments")["serving"])
    found: dict[str, Consumer] = {}
    for worker, served, started in cursor.fetchall():
        mode, _, tags = str(served).partition("|")
        if not reaper.is_dead_here(str(worker), started):
            found[str(worker)] = Consumer(str(worker), mode, frozenset(tags.split(",")) - {ALL_TAGS})
    return sorted(found.values(), key=lambda consumer: consumer.owner)


def listening_modes(listeners: Iterable[Consumer]) -> str:
    """What listeners take a tag, in short: ``ordered``, ``parallel x2``;
    ``-`` for none (or none this user may see)."""
    modes = Counter(listener.mode for listener in listeners)
    return ", ".join(mode if count == 1 else f"{mode} x{count}" for mode, count in modes.items()) or "-"


def refuse_mixed_modes(db: Database, options: ListenOptions) -> None:
    """Refuse to start beside a listener that consumes one of our tags in
    another mode, of those this user sees (and says when it sees only its own
    user's: MON$ hides the others')."""
    mine = mode_of(options)
    with db.transaction() as cursor:
        others = consumers(cursor)
        sees_every = sees_every_attachment(cursor)
    if not sees_every:
        log.info(
            "this user sees only its own user's listeners in MON$: one of another user that consumes these tags "
            "in another mode is not refused (docs/OPERATIONS.md, Users and rights)"
        )
    for other in others:
        if other.mode == mine:
            continue
        if not options.tags and not other.tags:
            what = "every tag"
        else:
            shared = {tag for tag in options.tags or other.tags if other.takes(tag)}
            if not shared:
                continue
            what = "tag(s) " + ", ".join(sorted(shared))
        raise SubsError(
            f"worker {other.owner} of another listener consumes {what} in {other.mode} mode; one tag's events must "
            f"be consumed in one mode: stop that listener, or start this one with its mode or other --tag values"
        )
