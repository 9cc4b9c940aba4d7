"""The database seam (db/connection.py) when its attachment is lost under
it: no crash, no traceback, and a clear error for whatever comes next."""

from __future__ import annotations

import os
import subprocess
import sys

LOSE_AN_OPEN_RESULT_SET = """
import gc, os, sys
from subscriptions.db.connection import Database
from subscriptions.db.errors import is_connection_lost
from subscriptions.db.settings import ConnectionSettings

settings = ConnectionSettings(sys.argv[1], os.environ["ISC_USER"], os.environ["ISC_PASSWORD"] or None)
for _ in range(3):
    db = Database(settings)
    try:
        with db.transaction() as cursor:
            cursor.execute("SELECT RDB$RELATION_NAME FROM RDB$RELATIONS")
            cursor.fetchone()  # a result set left open, as a failing read leaves it
            with Database(settings) as killer, killer.transaction() as other:
                other.execute("DELETE FROM MON$ATTACHMENTS WHERE MON$ATTACHMENT_ID = ?", (db.connection.info.id,))
            cursor.fetchall()
    except Exception as exc:
        assert is_connection_lost(exc), exc
    else:
        raise AssertionError("the killed attachment went on reading")
    try:
        with db.transaction():
            pass
    except Exception as exc:
        assert is_connection_lost(exc), exc
    else:
        raise AssertionError("a lost attachment began a transaction")
    db.close()
    del db
    gc.collect()
print("done")
"""


def test_a_lost_attachment_with_an_open_result_set_leaves_no_crash_behind(settings):
    """firebird-driver freed a lost attachment while a cursor still held its
    result set: on the embedded engines the garbage collector's close of the
    cursor then died of SIGSEGV (FIREBIRD-BUGS 9; a listener's supervisor
    did when its queue-metrics read was cut off). The seam leaves such an
    attachment alone, and raises what lost it for whatever comes next."""
    env = {**os.environ, "ISC_USER": settings.effective_user, "ISC_PASSWORD": settings.password or ""}
    run = subprocess.run(
        [sys.executable, "-c", LOSE_AN_OPEN_RESULT_SET, settings.dsn],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (run.returncode, run.stdout, run.stderr) == (0, "done\n", "")
