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
# isc_que_events takes a block's length as a C short.
MAX_BLOCK_BYTES = 32767


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


def event_blocks(names: Sequence[str], limit: int = MAX_BLOCK_BYTES) -> list[bytes]:
    """``names`` in as few event parameter blocks of at most ``limit`` bytes
    as their order allows."""
    blocks: list[bytes] = []
    group: list[str] = []
    size = 1  # the version byte
    for name in names:
        entry = 1 + len(name.encode("utf-8")) + _COUNT_BYTES
        if group and size + entry > limit:
            blocks.append(event_block(group))
            group, size = [], 1
        group.append(name)
        size += entry
    if group:
        blocks.append(event_block(group))
    return blocks


def event_counts(block: bytes) -> dict[str, int]:
    """Each name's count in an event parameter block."""
    counts: dict[str, int] = {}
    at = 1  # the version byte
    while at < len(block):
        length = block[at]
        name = block[at + 1 : at + 1 + length].decode("utf-8")
        at += 1 + length
        counts[name] = int.from_bytes(block[at : at + _COUNT_BYTES], "little")
        at += _COUNT_BYTES
    return counts


class _Registration:
    """One event parameter block registered on one attachment."""

    def __init__(self, handle: Any, block: bytes, notified: threading.Event) -> None:
        self._size = len(block)
        # The counts the server last reported, registered with again so that
        # only later posts notify; the callback writes the server's into
        # _reported, from the client library's thread.
        self._registered = (ctypes.c_ubyte * self._size).from_buffer_copy(block)
        self._reported = (ctypes.c_ubyte * self._size).from_buffer_copy(block)
        self._handle = handle
        self._event_id = fbapi.ISC_LONG(0)
        self._status = fbapi.ISC_STATUS_ARRAY()
        self._notified = notified
        self.pending = False  # registered and not yet notified
        self.ended = False  # the server ended the registration: the attachment is going or gone
        self._callback = fbapi.ISC_EVENT_CALLBACK(self._on_notification)

    def _on_notification(self, _argument: Any, length: int, updated: Any) -> None:
        """Called by the client library, on a thread of its own. Length 0:
        the registration was cancelled, or the server is gone."""
        if length:
            ctypes.memmove(self._reported, updated, min(length, self._size))
        else:
            self.ended = True
        self.pending = False
        self._notified.set()

    def posted(self) -> set[str]:
        """The names whose count the server reported above the one registered."""
        registered, reported = event_counts(bytes(self._registered)), event_counts(bytes(self._reported))
        return {name for name, count in reported.items() if count > registered.get(name, 0)}

    def register(self) -> None:
        ctypes.memmove(self._registered, self._reported, self._size)
        self.pending = True
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
            self.pending = False
            raise fbapi.exception_from_status(DatabaseError, self._status, "Error while registering for events:")

    def cancel(self) -> bool:
        """Cancel it if it still waits; False when the cancel failed."""
        if not self.pending or self.ended:
            return True
        self.pending = False
        fbapi.api.isc_cancel_events(self._status, self._handle, self._event_id)
        return not fbapi.db_api_error(self._status)


class EventWatch:
    """Registered interest in some events of one attachment. A notification
    means only "something was posted": callers drain, then wait again.
    Names that do not fit one event parameter block (its length is a C
    short: 32,767 bytes, 655 tags of 40 characters) take several
    registrations."""

    def __init__(self, connection: Connection, names: Sequence[str]) -> None:
        handle = connection._get_handle()
        self._notified = threading.Event()
        self._posted: set[str] = set()
        self._registrations: list[_Registration] = []
        for block in event_blocks(names):
            registration = _Registration(handle, block, self._notified)
            try:
                registration.register()
            except DatabaseError:
                self.abandon()  # the attachment is likely gone: no call into it for the others
                raise
            self._registrations.append(registration)

    @property
    def ended(self) -> bool:
        """The server ended a registration: the attachment is going or gone."""
        return any(registration.ended for registration in self._registrations)

    def take(self) -> bool:
        """Whether a notification came since the last take, without waiting;
        after one, registers again what was notified (unless the server ended
        a registration)."""
        if not self._notified.is_set():
            return False
        self._notified.clear()
        if not self.ended:
            for registration in self._registrations:
                if not registration.pending:
                    self._posted |= registration.posted()
                    registration.register()
        return True

    def posted(self, name: str) -> bool:
        """Whether ``name`` was posted in the notifications taken since the
        last call for it (the first notification reports every count, so it
        may say yes once without a post)."""
        if name not in self._posted:
            return False
        self._posted.discard(name)
        return True

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a notification, then take it."""
        return self._notified.wait(timeout) and self.take()

    def close(self) -> None:
        """Cancel the registrations still waiting. A failed cancel is not an
        error (the attachment may be going, and the registration with it),
        but the watch is then kept. Once the server ended one, none is
        touched: its attachment is going, and a cancel on it while the client
        library's event thread is in a callback aborts the process."""
        if self.ended or not all([registration.cancel() for registration in self._registrations]):
            _kept.append(self)

    def abandon(self) -> None:
        """Leave the registrations to their attachment's fate, without a call
        into the client library."""
        _kept.append(self)
