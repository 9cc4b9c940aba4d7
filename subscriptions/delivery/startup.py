"""What `subs listen` does before its first worker starts.

``check`` only reads: it refuses a setup that cannot work, with one-line
errors. ``prepare`` then writes: it clears events of purged subscriptions,
disconnects attachments left by the workers of a killed listener and
rebuilds the claim index. `listen --detach` runs ``check`` in a child
interpreter before it detaches (the detaching process must never load the
engine) and ``prepare`` in the background process; each runs once.
"""

from __future__ import annotations

import logging
import pickle
import sys

import pluggy
from firebird.driver import Cursor, DatabaseError

from subscriptions.capture.drift import NOT_SUBSCRIBED, OK, STALE, capture_states
from subscriptions.capture.names import check_tag
from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.db.errors import first_line
from subscriptions.errors import SubsError
from subscriptions.plugins import Handler, collect_handlers, plugin_manager, unused_tables
from subscriptions.schema.version import require_current

from . import housekeeping, reaper
from .claims import load_targets
from .options import ListenOptions
from .serving import refuse_mixed_modes

log = logging.getLogger("subs.listener")


def load_handlers(options: ListenOptions, manager: pluggy.PluginManager | None = None) -> dict[str, Handler]:
    """The handlers by tag; refuses --tag values no plugin handles."""
    for tag in options.tags:
        check_tag(tag)
    handlers = collect_handlers(manager or plugin_manager(options.plugins), options.handler_config)
    missing = [tag for tag in options.tags if tag not in handlers]
    if missing:
        raise SubsError(f"no handler for tag(s) {', '.join(missing)}; `subs handlers` lists the known ones")
    return handlers


def check(options: ListenOptions) -> None:
    """Everything that can be wrong before a worker starts, read-only: the
    plugins, the database, then what the plugins check by trying
    (``listener_startup``) for the tags this listener serves."""
    manager = plugin_manager(options.plugins)
    load_handlers(options, manager)
    with Database(options.settings) as db:
        require_current(db)
        refuse_mixed_modes(db, options)
    served = {tag: table for tag, table in options.handler_config.items() if not options.tags or tag in options.tags}
    manager.hook.listener_startup(config=served)


def check_main() -> None:
    """``check`` in a child interpreter (`listen --detach`): options arrive
    pickled on stdin; an error is the last line on stderr and exit code 1."""
    options = pickle.load(sys.stdin.buffer)
    try:
        check(options)
    except (SubsError, DatabaseError) as exc:
        print(first_line(exc), file=sys.stderr)
        sys.exit(1)


def rebuild_claim_index(db: Database) -> bool:
    """Housekeeping must not stop the listener: a failure is a warning."""
    try:
        return housekeeping.rebuild_queue_index(db)
    except DatabaseError as exc:
        log.warning("could not rebuild the claim index: %s", first_line(exc))
        return False


def delete_orphans(db: Database) -> int:
    """Delete the events of purged subscriptions (sql/claims.sql). The sweep
    walks the claim index, so another listener rebuilding it meanwhile is a
    conflict: the sweep runs again."""

    def work(cursor: Cursor) -> int:
        cursor.execute(sql.load("claims")["delete_orphans"])
        (deleted,) = cursor.fetchone()
        return int(deleted)

    return db.run(work)


def prepare(options: ListenOptions) -> None:
    """Start-up housekeeping, and the log lines saying what will be served."""
    handlers = load_handlers(options)
    with Database(options.settings) as db:
        orphans = delete_orphans(db)
        reaper.reap(db)  # the workers of a listener that was killed
        rebuild_claim_index(db)
        targets = load_targets(db)
        served = sorted(options.tags or {t.tag for t in targets if t.tag in handlers})
        captures = db.run(lambda cursor: capture_states(cursor, {t.table for t in targets if t.tag in served}))
        version = ".".join(map(str, db.engine_version))
    if orphans:
        log.info("deleted %s event(s) of purged subscriptions", orphans)
    for note in unused_tables(handlers, options.handler_config):
        log.warning("%s", note)
    for target in targets:
        if target.tag not in handlers and not options.tags:  # --tag: the rest is someone else's
            log.warning(
                "subscription %s (%s %s %s) has no handler for its tag; its events stay pending",
                target.sub_id,
                target.table,
                target.action,
                target.tag,
            )
    for table, state in captures.items():
        if state not in (OK, NOT_SUBSCRIBED):
            remedy = "`subs init` makes it again" if state == STALE else 'README, "Drift is visible": how to repair it'
            log.warning("the capture of %s is not as subscribed: %s (%s)", table, state, remedy)
    log.info(
        "listening on %s (Firebird %s) in %s mode with %s worker(s) for tags: %s",
        options.settings.dsn,
        version,
        options.mode,
        options.workers,
        ", ".join(served) or "(none yet)",
    )
