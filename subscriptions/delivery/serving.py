"""One stream, one mode: a listener refuses to start when a live worker of
another listener already consumes one of its tags in another mode (ordered,
parallel, parallel with --key-order), since mixed consumers would silently
break the order one of them promises. Each worker's attachment says what it
serves (a context variable, see sql/attachments.sql); a starting listener
reads the others'. Two listeners starting at the same instant are not
caught."""

from __future__ import annotations

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.errors import SubsError

from . import reaper
from .options import PARALLEL, ListenOptions

ALL_TAGS = "*"


def mode_of(options: ListenOptions) -> str:
    return f"{PARALLEL} --key-order" if options.mode == PARALLEL and options.key_order else options.mode


def serves(options: ListenOptions) -> str:
    """``<mode>|<tag>,<tag>`` or ``<mode>|*`` for every tag."""
    return f"{mode_of(options)}|{','.join(sorted(options.tags)) or ALL_TAGS}"


def _overlap(mine: tuple[str, ...], theirs: set[str]) -> set[str] | None:
    """The tags both serve (None: every tag), or an empty set."""
    if not mine and ALL_TAGS in theirs:
        return None
    if not mine:
        return theirs
    if ALL_TAGS in theirs:
        return set(mine)
    return set(mine) & theirs


def refuse_mixed_modes(db: Database, options: ListenOptions) -> None:
    mine = mode_of(options)
    with db.transaction() as cursor:
        cursor.execute(sql.load("attachments")["serving"])
        others = cursor.fetchall()
    for worker, served in others:
        mode, _, tags = str(served).partition("|")
        if mode == mine or reaper.is_dead_here(str(worker)):
            continue
        shared = _overlap(options.tags, set(tags.split(",")))
        if shared is None or shared:
            what = "every tag" if shared is None else "tag(s) " + ", ".join(sorted(shared))
            raise SubsError(
                f"worker {worker} of another listener consumes {what} in {mode} mode; one tag's events must "
                f"be consumed in one mode: stop that listener, or start this one with its mode or other --tag values"
            )
