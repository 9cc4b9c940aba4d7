"""Firebird event notifications (POST_EVENT) on one attachment.

firebird-driver's EventCollector re-registers from a thread of its own the
moment a notification comes in, and when that fails (the attachment was
killed, the server went away) cancels the registration there and then, on
the dead attachment, while the client library's event thread is still
inside its callback: the client library then aborts the whole process
(SIGABRT; docs/FIREBIRD-BUGS.md 8). An EventWatch makes its Firebird calls
only in its owner's thread, registers again only when the owner takes a
notification, and leaves alone a registration the server has ended.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

from firebird.driver import Connection, DatabaseError, fbapi

# Watches whose registration may outlive their owner's interest (abandoned,
# or a cancel that failed): the client library may still call back into
# them, so they are kept for the life of the process.
_kept: list[EventWatch] = []
_EPB_VERSION1 = 1
_COUNT_BYTES = 4
_UCHAR_P = ctypes.POINTER(fbapi.ISC_UCHAR)


def event_block(names: Sequence[str]) -> bytes:
    """An event parameter block for ``names`` with every count at zero: the
    layout isc_event_block makes (version, then per name its length, its
    bytes and a 4-byte count)."""
    block = bytearray([_EPB_VERSION1])
    for name in names:
        encoded = name.encode("utf-8")
        if not 0 < len(encoded) < 256:
            raise ValueError(f"event name {name!r} must be 1 to 255 bytes long")
        block += bytes([len(encoded)]) + encoded + bytes(_COUNT_BYTES)
    return bytes(block)


class EventWatch:
    """Registered interest in some events of one attachment. A notification
    means only "something was posted": callers drain, then wait again."""

    def __init__(self, connection: Connection, names: Sequence[str]) -> None:
        block = event_block(names)
        self._size = len(block)
        # The counts the server last reported, registered with again so that
        # only later posts notify; the callback writes the server's into
        # _reported, from the client library's thread.
        self._registered = (ctypes.c_ubyte * self._size).from_buffer_copy(block)
        self._reported = (ctypes.c_ubyte * self._size).from_buffer_copy(block)
        self._handle = connection._get_handle()
        self._event_id = fbapi.ISC_LONG(0)
        self._status = fbapi.ISC_STATUS_ARRAY()
        self._notified = threading.Event()
        self._pending = False  # registered and not yet notified
        self.ended = False  # the server ended the registration: the attachment is going or gone
        self._callback = fbapi.ISC_EVENT_CALLBACK(self._on_notification)
        self._register()

    def _on_notification(self, _argument: Any, length: int, updated: Any) -> None:
        """Called by the client library, on a thread of its own. Length 0:
        the registration was cancelled, or the server is gone."""
        if length:
            ctypes.memmove(self._reported, updated, min(length, self._size))
        else:
            self.ended = True
        self._pending = False
        self._notified.set()

    def _register(self) -> None:
        ctypes.memmove(self._registered, self._reported, self._size)
        self._pending = True
        fbapi.api.isc_que_events(
            self._status,
            self._handle,
            self._event_id,
            self._size,
            ctypes.cast(self._registered, _UCHAR_P),
            self._callback,
            ctypes.cast(self._reported, _UCHAR_P),
        )
        if fbapi.db_api_error(self._status):
            self._pending = False
            raise fbapi.exception_from_status(DatabaseError, self._status, "Error while registering for events:")

    def take(self) -> bool:
        """Whether a notification came since the last take, without waiting;
        after one, registers again (unless the server ended it)."""
        if not self._notified.is_set():
            return False
        self._notified.clear()
        if not self.ended:
            self._register()
        return True

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a notification, then take it."""
        return self._notified.wait(timeout) and self.take()

    def close(self) -> None:
        """Cancel a registration still waiting. A failed cancel is not an
        error (the attachment may be going, and the registration with it),
        but the watch is then kept."""
        if self._pending and not self.ended:
            fbapi.api.isc_cancel_events(self._status, self._handle, self._event_id)
            if fbapi.db_api_error(self._status):
                _kept.append(self)
            self._pending = False

    def abandon(self) -> None:
        """Leave the registration to its attachment's fate, without a call
        into the client library."""
        _kept.append(self)
