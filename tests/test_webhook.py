"""The webhook handler against a real HTTP server on 127.0.0.1
(tests/httppeer.py): what it posts, how it signs (checked with the Standard
Webhooks reference library), https with a private authority and client
certificates (made with trustme), which answers fail and when to retry
them, and which settings it refuses at start-up. No database is needed."""

from __future__ import annotations

import base64
import email.utils
import json
import os
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import standardwebhooks

from subscriptions import RetryLater, Undeliverable, __version__
from subscriptions.errors import SubsError
from subscriptions.testing import deliver, load_handlers, make_event

import httppeer
import httpproxy
from certificates import Pki
from conftest import free_port
from httppeer import LOOPBACK, HttpPeer


def handler(settings: dict[str, Any], tag: str = "webhook"):
    """The function the listener would call for ``tag`` with these settings."""
    return load_handlers(config={tag: settings})[tag]


def new_secret(size: int = 32) -> str:
    return "whsec_" + base64.b64encode(os.urandom(size)).decode()


def test_webhook_posts_event_json_with_headers(http_peer: HttpPeer) -> None:
    post = handler({"url": f"{http_peer.base}/ok", "headers": {"X-Token": "t0k"}})
    event = make_event(
        "webhook", table="ORDERS", action="U", id=42, attempt=3, new={"ID": 42, "AMOUNT": Decimal("9.90")}
    )
    deliver(post, event)
    [request] = http_peer.requests
    assert request.path == "/ok"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Subs-Event-Id"] == "42"
    assert request.headers["X-Subs-Attempt"] == "3"
    assert request.headers["X-Token"] == "t0k"
    assert request.headers["User-Agent"] == f"subs/{__version__}"
    body = json.loads(request.body)
    assert body["table"] == "ORDERS" and body["action"] == "U" and body["tag"] == "webhook"
    assert body["new"] == {"ID": 42, "AMOUNT": "9.90"}


def test_header_values_that_are_numbers_go_as_text(http_peer: HttpPeer) -> None:
    deliver(handler({"url": f"{http_peer.base}/ok", "headers": {"X-Version": 2}}), make_event("webhook"))
    assert http_peer.requests[0].headers["X-Version"] == "2"


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({"X Token": "t"}, "headers: 'X Token' is not a header name; use letters, digits and '-'"),
        ({"X-Token:": "t"}, "headers: 'X-Token:' is not a header name"),
        ({"X-Token": "t0k\r\nX-Admin: yes"}, "headers: X-Token's value holds a line break; an HTTP header cannot"),
        ({"X-Flag": True}, "headers: X-Flag must be text, not bool"),
        ({"X-List": ["a"]}, "headers: X-List must be text, not list"),
        ({"content-length": "3"}, "headers: Content-Length is written by subs or HTTP; leave it out"),
        ({"X-SUBS-ATTEMPT": "1"}, "headers: X-Subs-Attempt is written by subs or HTTP; leave it out"),
        ({"Webhook-Signature": "v1,x"}, "headers: webhook-signature is written by subs or HTTP; leave it out"),
    ],
)
def test_headers_the_request_could_not_carry_are_refused_at_start_up(headers: dict, fragment: str) -> None:
    """Before, a line break in a value failed every attempt, and a header
    subs writes was silently replaced (or broke the request)."""
    with pytest.raises(SubsError) as error:
        load_handlers(config={"webhook": {"url": "http://127.0.0.1:9/hook", "headers": headers}})
    assert str(error.value).startswith(f"[handlers.webhook] {fragment}"), str(error.value)


def test_webhook_accepts_204(http_peer: HttpPeer) -> None:
    deliver(handler({"url": f"{http_peer.base}/empty"}), make_event("webhook"))
    assert len(http_peer.requests) == 1


def test_webhook_sends_url_credentials_as_basic_auth_and_hides_them(http_peer: HttpPeer) -> None:
    url = http_peer.base.replace("//", "//alice:s3cr%40t@") + "/fail?token=hidden"
    with pytest.raises(RuntimeError) as failure:
        deliver(handler({"url": url}), make_event("webhook"))
    message = str(failure.value)
    assert "HTTP 500" in message and f"{http_peer.base}/fail" in message
    assert "s3cr" not in message and "alice" not in message and "hidden" not in message
    auth = http_peer.requests[0].headers["Authorization"]
    assert base64.b64decode(auth.removeprefix("Basic ")) == b"alice:s3cr@t"


def test_webhook_does_not_follow_redirects(http_peer: HttpPeer) -> None:
    with pytest.raises(RuntimeError, match="HTTP 302"):
        deliver(handler({"url": f"{http_peer.base}/redirect"}), make_event("webhook"))
    assert [r.path for r in http_peer.requests] == ["/redirect"]


def test_webhook_times_out(http_peer: HttpPeer) -> None:
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"/slow: no answer within 0.5 s"):
        deliver(handler({"url": f"{http_peer.base}/slow", "timeout": "0.5"}), make_event("webhook"))
    assert time.monotonic() - start < 3


def test_webhook_fails_on_closed_port() -> None:
    url = f"http://{LOOPBACK}:{free_port()}/hook"
    with pytest.raises(RuntimeError, match=r"webhook http://127\.0\.0\.1:\d+/hook: .*refused"):
        deliver(handler({"url": url, "timeout": 2}), make_event("webhook"))


def test_webhook_without_url_says_how_to_set_it() -> None:
    with pytest.raises(SubsError, match=r"\[handlers\.webhook\] url = .*SUBS__WEBHOOK__URL"):
        deliver(handler({}), make_event("webhook"))


def test_alias_tag_posts_to_its_own_url(http_peer: HttpPeer) -> None:
    config = {
        "webhook": {"url": f"{http_peer.base}/main"},
        "audit": {"use": "webhook", "url": f"{http_peer.base}/audit"},
    }
    handlers = load_handlers(config=config)
    deliver(handlers["audit"], make_event("audit"))
    deliver(handlers["webhook"], make_event("webhook"))
    assert [r.path for r in http_peer.requests] == ["/audit", "/main"]
    assert json.loads(http_peer.requests[0].body)["tag"] == "audit"


# --- Retry-After ---------------------------------------------------------------


def throttled(http_peer: HttpPeer, status: int, after: str) -> BaseException:
    """What posting to a receiver answering ``status`` with ``Retry-After: after`` raises."""
    query = f"status={status}&after={after}"
    with pytest.raises(Exception) as raised:  # noqa: PT011 (which type is what the tests check)
        deliver(handler({"url": f"{http_peer.base}/throttle?{query}"}), make_event("webhook"))
    return raised.value


@pytest.mark.parametrize("status", [429, 503])
def test_a_throttled_answer_asks_for_its_retry_after(http_peer: HttpPeer, status: int) -> None:
    error = throttled(http_peer, status, "7")
    assert isinstance(error, RetryLater) and error.seconds == 7
    assert f"HTTP {status} " in str(error) and str(error).endswith("; Retry-After 7 s")


def test_a_retry_after_date_is_read_and_a_long_wait_capped(http_peer: HttpPeer) -> None:
    in_90_seconds = email.utils.formatdate(time.time() + 90, usegmt=True).replace(" ", "%20")
    error = throttled(http_peer, 503, in_90_seconds)
    assert isinstance(error, RetryLater) and 80 <= error.seconds <= 90
    error = throttled(http_peer, 429, "86400")
    assert isinstance(error, RetryLater) and error.seconds == 3600
    a_minute_ago = email.utils.formatdate(time.time() - 60, usegmt=True).replace(" ", "%20")
    error = throttled(http_peer, 429, a_minute_ago)
    assert isinstance(error, RetryLater) and error.seconds == 0


@pytest.mark.parametrize(("status", "after"), [(500, "7"), (429, "soon"), (503, "-1"), (429, "")])
def test_other_answers_are_plain_failures(http_peer: HttpPeer, status: int, after: str) -> None:
    """Retry-After counts only on 429 and 503, and only when it can be read."""
    error = throttled(http_peer, status, after)
    assert not isinstance(error, RetryLater) and f"HTTP {status} " in str(error)


def test_a_body_too_large_for_the_receiver_is_undeliverable(http_peer: HttpPeer) -> None:
    """A 413 answers every attempt alike: the event goes dead at once."""
    error = throttled(http_peer, 413, "5")
    size = len(http_peer.requests[-1].body)
    assert isinstance(error, Undeliverable) and str(error).startswith(f"webhook {http_peer.base}/throttle: HTTP 413 ")
    assert str(error).endswith(f" for a body of {size:,} bytes; raise the receiver's limit, then `subs retry`")


# --- signatures ----------------------------------------------------------------


def test_a_signed_request_verifies_with_the_reference_library(http_peer: HttpPeer) -> None:
    """Standard Webhooks' own verifier accepts each attempt; its id is the
    event's idempotency key, the same on every attempt, its timestamp now."""
    secret = new_secret()
    post = handler({"url": f"{http_peer.base}/ok", "secret": secret})
    for attempt in (1, 2):
        deliver(post, make_event("webhook", id=42, attempt=attempt, database_id="db1", new={"AMOUNT": Decimal("1.5")}))
    for request in http_peer.requests:
        body = standardwebhooks.Webhook(secret).verify(request.body, request.headers)
        assert body["new"] == {"AMOUNT": "1.5"}
        assert request.headers["webhook-id"] == "db1:42"
        assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 60
    tampered = http_peer.requests[0].body.replace(b"1.5", b"9.5")
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(secret).verify(tampered, http_peer.requests[0].headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(new_secret()).verify(http_peer.requests[0].body, http_peer.requests[0].headers)


@pytest.mark.parametrize("listed", [True, False], ids=["toml list", "space-separated"])
def test_while_a_secret_is_replaced_each_one_signs(http_peer: HttpPeer, listed: bool) -> None:
    old, new = new_secret(), new_secret(64)
    post = handler({"url": f"{http_peer.base}/ok", "secret": [new, old] if listed else f"{new} {old}"})
    deliver(post, make_event("webhook"))
    [request] = http_peer.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        standardwebhooks.Webhook(secret).verify(request.body, request.headers)


def test_an_unsigned_request_has_no_signature_headers(http_peer: HttpPeer) -> None:
    deliver(handler({"url": f"{http_peer.base}/ok"}), make_event("webhook"))
    assert not {"webhook-id", "webhook-signature"} & {name.lower() for name in http_peer.requests[0].headers}


SHORT_SECRET = "whsec_" + base64.b64encode(b"sixteen bytes!!!").decode()


@pytest.mark.parametrize(
    ("secret", "fragment"),
    [
        ("c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "secret is not whsec_ followed by base64; make one with"),
        ("whsec_not-base64!", "secret is not whsec_ followed by base64"),
        (SHORT_SECRET, "secret holds 16 bytes; use 24 to 64 random bytes"),
        ("whsec_" + base64.b64encode(bytes(65)).decode(), "secret holds 65 bytes"),
        ([new_secret(), 42], "secret number 2 is not whsec_"),
        ([], 'secret must be "whsec_..." or a list of them'),
        ("", 'secret must be "whsec_..." or a list of them'),
        ({"key": "x"}, 'secret must be "whsec_..." or a list of them'),
    ],
)
def test_a_bad_secret_is_refused_at_start_up_without_showing_it(secret: Any, fragment: str) -> None:
    with pytest.raises(SubsError) as error:
        load_handlers(config={"webhook": {"url": "http://127.0.0.1:9/hook", "secret": secret}})
    message = str(error.value)
    assert message.startswith("[handlers.webhook] ") and fragment in message, message
    if isinstance(secret, str) and secret:
        assert secret.removeprefix("whsec_") not in message


# --- TLS -----------------------------------------------------------------------


def test_a_receiver_of_a_private_authority_is_trusted_with_its_ca_file(pki: Pki) -> None:
    with httppeer.serving(pki.server()) as peer:
        deliver(handler({"url": f"{peer.base}/ok", "ca_file": pki.ca_file}), make_event("webhook"))
        with pytest.raises(RuntimeError, match=r"certificate is not trusted \(set ca_file to its authority\)"):
            deliver(handler({"url": f"{peer.base}/ok"}), make_event("webhook"))
    assert len(peer.requests) == 1


def test_a_receiver_that_asks_for_a_client_certificate_gets_it(pki: Pki) -> None:
    with httppeer.serving(pki.server(ask_client=True)) as peer:
        url = f"{peer.base}/ok"
        with pytest.raises(RuntimeError, match=r"webhook https://127\.0\.0\.1:\d+/ok: "):
            deliver(handler({"url": url, "ca_file": pki.ca_file}), make_event("webhook"))
        mutual = {"url": url, "ca_file": pki.ca_file, "client_cert": pki.client_cert, "client_key": pki.client_key}
        deliver(handler(mutual), make_event("webhook"))
        deliver(handler({"url": url, "ca_file": pki.ca_file, "client_cert": pki.client_both}), make_event("webhook"))
    assert len(peer.requests) == 2


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"ca_file": "{tmp}/absent.pem"}, "ca_file: {tmp}/absent.pem is not a file"),
        ({"ca_file": "{tmp}"}, "ca_file: {tmp} is not a file"),
        ({"ca_file": "{tmp}/client_key.pem"}, "ca_file: {tmp}/client_key.pem holds no PEM certificate"),
        ({"client_cert": "{tmp}/client_cert.pem", "client_key": "{tmp}/stranger_key.pem"}, "KEY_VALUES_MISMATCH"),
        ({"client_cert": "{tmp}/client_cert.pem"}, "client_cert: not a PEM certificate and its private key"),
        ({"client_key": "{tmp}/client_key.pem"}, "client_key needs client_cert"),
        ({"ca_file": 5}, 'ca_file must be the path of a PEM file, e.g. "/etc/subs/ca_file.pem"'),
        ({"url": "http://127.0.0.1:9/", "ca_file": "{tmp}/ca_file.pem"}, "ca_file: for https:// urls only"),
    ],
)
def test_bad_tls_settings_are_refused_at_start_up(pki: Pki, tmp_path: Path, settings: dict, fragment: str) -> None:
    given = {"url": "https://127.0.0.1:9/", **settings}
    given = {name: value.format(tmp=tmp_path) if isinstance(value, str) else value for name, value in given.items()}
    with pytest.raises(SubsError) as error:
        load_handlers(config={"webhook": given})
    assert str(error.value).startswith("[handlers.webhook] ")
    assert fragment.format(tmp=tmp_path) in str(error.value), str(error.value)


# --- connections and proxies -------------------------------------------------------


def test_one_connection_serves_event_after_event(http_peer: HttpPeer) -> None:
    post = handler({"url": f"{http_peer.base}/ok"})
    for number in range(1, 4):
        deliver(post, make_event("webhook", id=number))
    assert len({request.client for request in http_peer.requests}) == 1, http_peer.requests


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[httpproxy.Proxy]:
    """A forward proxy, and an environment that names no other."""
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with httpproxy.serving() as serving:
        yield serving


def test_http_goes_through_the_environments_proxy_with_its_credentials(
    http_peer: HttpPeer, proxy: httpproxy.Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", f"http://squid:p%40ss@{proxy.address}")
    deliver(handler({"url": f"{http_peer.base}/ok?token=t"}), make_event("webhook"))
    [(method, target, authorization)] = proxy.seen
    assert (method, target) == ("POST", f"{http_peer.base}/ok?token=t")
    assert base64.b64decode((authorization or "").removeprefix("Basic ")) == b"squid:p@ss"
    assert [request.path for request in http_peer.requests] == ["/ok?token=t"]


def test_https_is_tunnelled_through_the_proxy(pki: Pki, proxy: httpproxy.Proxy, monkeypatch) -> None:
    monkeypatch.setenv("https_proxy", proxy.address)  # a proxy without scheme means http://
    with httppeer.serving(pki.server()) as peer:
        deliver(handler({"url": f"{peer.base}/ok", "ca_file": pki.ca_file}), make_event("webhook"))
    assert [(method, target) for method, target, _ in proxy.seen] == [("CONNECT", peer.base.removeprefix("https://"))]
    assert len(peer.requests) == 1


def test_no_proxy_names_the_hosts_reached_directly(http_peer: HttpPeer, proxy: httpproxy.Proxy, monkeypatch) -> None:
    monkeypatch.setenv("http_proxy", f"http://{proxy.address}")
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    deliver(handler({"url": f"{http_peer.base}/ok"}), make_event("webhook"))
    assert proxy.seen == [] and len(http_peer.requests) == 1


def test_a_proxy_the_webhook_cannot_use_is_a_start_up_error(proxy: httpproxy.Proxy, monkeypatch) -> None:
    monkeypatch.setenv("https_proxy", "socks5://user:secret@127.0.0.1:1080")
    with pytest.raises(SubsError) as error:
        load_handlers(config={"webhook": {"url": "https://hooks.example.com/in"}})
    assert str(error.value) == (
        "[handlers.webhook] proxy: the environment names a socks5:// proxy (http_proxy / https_proxy); "
        "use an http:// one"
    )
    assert "secret" not in str(error.value)
