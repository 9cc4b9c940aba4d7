"""A handler's RetryLater sets the least delay before the next attempt: the
webhook raises it for a 429 or 503 answer's Retry-After, and a listener
honours it over its shorter backoff, on every engine and in both modes."""

from __future__ import annotations

import email.utils
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from subscriptions import RetryLater
from subscriptions.errors import MAX_RETRY_AFTER
from subscriptions.testing import deliver, load_handlers, make_event

from conftest import ITEMS_TABLE, Subs, execute, query, wait_until
from listening import Listener, insert

LOOPBACK = "127.0.0.1"


@dataclass
class Throttler:
    """A receiver that answers the first POST of each event with ``status``
    and ``Retry-After: retry_after``, and 200 after that."""

    base: str = ""
    status: int = 429
    retry_after: str = "2"
    posts: list[tuple[str, str, float]] = field(default_factory=list)  # event id, attempt, monotonic time


@pytest.fixture
def throttler() -> Iterator[Throttler]:
    peer = Throttler()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            event_id = self.headers["X-Subs-Event-Id"]
            first = all(seen != event_id for seen, _, _ in peer.posts)
            peer.posts.append((event_id, self.headers["X-Subs-Attempt"], time.monotonic()))
            self.send_response(peer.status if first else 200)
            if first:
                self.send_header("Retry-After", peer.retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
    peer.base = f"http://{LOOPBACK}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield peer
    server.shutdown()
    server.server_close()


def post_once(peer: Throttler) -> None:
    webhook = load_handlers(config={"webhook": {"url": f"{peer.base}/hook"}})["webhook"]
    deliver(webhook, make_event("webhook", id=len(peer.posts) + 1))


@pytest.mark.parametrize("status", [429, 503])
def test_the_webhook_asks_for_the_receivers_retry_after(throttler: Throttler, status: int) -> None:
    throttler.status, throttler.retry_after = status, "7"
    with pytest.raises(RetryLater, match=rf"HTTP {status} .*; Retry-After 7 s") as raised:
        post_once(throttler)
    assert raised.value.seconds == 7


def test_the_webhook_reads_an_http_date_and_caps_a_long_wait(throttler: Throttler) -> None:
    throttler.retry_after = email.utils.formatdate(time.time() + 90, usegmt=True)
    with pytest.raises(RetryLater) as raised:
        post_once(throttler)
    assert 80 <= raised.value.seconds <= 90
    throttler.retry_after = "86400"
    with pytest.raises(RetryLater) as raised:
        post_once(throttler)
    assert raised.value.seconds == 3600
    throttler.retry_after = email.utils.formatdate(time.time() - 60, usegmt=True)
    with pytest.raises(RetryLater) as raised:
        post_once(throttler)
    assert raised.value.seconds == 0


@pytest.mark.parametrize(("status", "retry_after"), [(500, "7"), (429, "soon"), (503, "-1"), (429, "")])
def test_other_answers_are_plain_failures(throttler: Throttler, status: int, retry_after: str) -> None:
    """Retry-After counts only on 429 and 503, and only when it can be read."""
    throttler.status, throttler.retry_after = status, retry_after
    with pytest.raises(RuntimeError, match=rf"HTTP {status} ") as raised:
        post_once(throttler)
    assert not isinstance(raised.value, RetryLater)


@pytest.mark.parametrize("seconds", [-1, math.nan, math.inf, MAX_RETRY_AFTER + 1])
def test_retry_later_refuses_a_delay_it_cannot_keep(seconds: float) -> None:
    with pytest.raises(ValueError, match="RetryLater needs 0 to"):
        RetryLater("busy", seconds)


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_listener_waits_the_retry_after_its_handler_asked_for(
    settings, tmp_path: Path, throttler: Throttler, mode: str, listeners: list[Listener], monkeypatch
) -> None:
    """Three events, each answered 429 with Retry-After 2 at first: each
    comes again as attempt 2, no sooner than 2 s later (the listener's
    backoff alone would wait 0.2 s at most), and then it is handled."""
    execute(settings, ITEMS_TABLE)
    Subs(settings).ok("add", "items", "I", "webhook")
    config = tmp_path / "subs.toml"
    config.write_text(f'[handlers.webhook]\nurl = "{throttler.base}/hook"\n')
    monkeypatch.setenv("SUBS_CONFIG", str(config))
    listener = Listener(settings, tmp_path, "--mode", mode)
    listeners.append(listener)
    insert(settings, 1, 3)
    wait_until(lambda: query(settings, "SELECT COUNT(*) FROM EVENT_LOG") == [(0,)], what="every event handled")
    by_event: dict[str, list[tuple[str, float]]] = {}
    for event_id, attempt, when in throttler.posts:
        by_event.setdefault(event_id, []).append((attempt, when))
    assert len(by_event) == 3, throttler.posts
    for (first, failed_at), (second, retried_at) in by_event.values():
        assert (first, second) == ("1", "2")
        assert retried_at - failed_at >= 1.9  # a claimer may claim 0.05 s early (RETRY_MARGIN)
    assert "Retry-After 2 s; retrying in 2.0s" in listener.output()
