"""Tag ``webhook``: POSTs each event as JSON to a URL.

Settings (``[handlers.webhook]`` in subs.toml, or ``SUBS__WEBHOOK__<KEY>``):

``url`` (required)
    Where to POST. Credentials in the URL (``https://user:pass@host/...``) are
    sent as HTTP basic authentication and never shown in messages.
``timeout``
    Seconds to wait for the connection and for each read (default 10).
``headers``
    A table of extra request headers, e.g. ``headers = { Authorization = "Bearer ..." }``;
    not the ones subs writes (below) or the HTTP client does (``Content-Length``,
    ``Transfer-Encoding``).
``secret``
    Sign each request as Standard Webhooks (standardwebhooks.com) says, so the
    receiver can check that it comes from us, unchanged and recent: a secret
    ``whsec_<base64 of 24 to 64 random bytes>``, or several (a list, or
    separated by spaces) while the receiver moves to a new one: each signs.
    Never shown in messages.
``ca_file``
    For an https URL: a PEM file of the certificate authorities to trust
    instead of the system's (a receiver with a certificate of your own CA).
``client_cert``, ``client_key``
    For an https URL whose receiver asks for a client certificate (mutual
    TLS): PEM files of the certificate and its unencrypted private key (or
    both in ``client_cert``).

The body is ``Event.to_json()``, with the headers ``X-Subs-Event-Id`` and
``X-Subs-Attempt``; with a secret also ``webhook-id`` (the event's idempotency
key, the same on every attempt), ``webhook-timestamp`` (Unix seconds of this
attempt) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
id.timestamp.body>`` per secret, space-separated). Any 2xx status is a
delivery; any other status (redirects are not followed), a connection error
or a timeout is a failure, retried later. A 429 or 503 answer's
``Retry-After`` (seconds or an HTTP date, up to an hour) is honoured: the
next attempt waits at least that long. A 413 (Payload Too Large) makes the
event undeliverable: no attempt would send less (``subs retry`` after the
receiver's limit is raised). Connections are kept between events
and go through the environment's proxy (webhook_http.py).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import email.utils
import hashlib
import hmac
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from subscriptions import __version__, hookimpl
from subscriptions.config import check_setting_names, positive_setting, tables_using, url_setting
from subscriptions.errors import RetryLater, SubsError, Undeliverable
from subscriptions.events import Event

from . import tls

SETTINGS = ("url", "timeout", "headers", "secret", *tls.FILES)
DEFAULT_TIMEOUT = 10.0
# Statuses whose Retry-After says when the receiver wants us back (RFC 9110, RFC 6585).
_THROTTLED = (429, 503)
_TOO_LARGE = 413
# A longer Retry-After is taken as this: a receiver's mistake should not park events for days.
MAX_RETRY_AFTER = 3600.0
SECRET_PREFIX = "whsec_"
# Key sizes Standard Webhooks recommends: shorter is guessable, longer gains nothing.
SECRET_BYTES = (24, 64)
# A header name is a token (RFC 9110, 5.1).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers subs writes itself, and those only the HTTP client may write.
_NOT_YOURS = (
    "Content-Type",
    "X-Subs-Event-Id",
    "X-Subs-Attempt",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "Content-Length",
    "Transfer-Encoding",
)


@dataclass(frozen=True)
class Target:
    """Where and how one tag's events are posted."""

    url: str
    timeout: float
    headers: dict[str, str]
    keys: tuple[bytes, ...]  # the decoded signing secrets
    tls: tuple[str | None, str | None, str | None]  # ca_file, client_cert, client_key


def _keys(tag: str, secret: Any) -> tuple[bytes, ...]:
    """The HMAC keys of ``secret`` (one or a list); messages never show it."""
    secrets = secret.split() if isinstance(secret, str) else secret
    if not isinstance(secrets, list) or not secrets:
        raise SubsError(f'[handlers.{tag}] secret must be "whsec_..." or a list of them')
    keys = []
    for number, text in enumerate(secrets, 1):
        which = f"[handlers.{tag}] secret" + (f" number {number}" if len(secrets) > 1 else "")
        try:
            if not isinstance(text, str) or not text.startswith(SECRET_PREFIX):
                raise ValueError
            key = base64.b64decode(text.removeprefix(SECRET_PREFIX), validate=True)
        except (ValueError, binascii.Error):
            raise SubsError(
                f"{which} is not whsec_ followed by base64; make one with: python3 -c "
                "'import base64, os; print(\"whsec_\" + base64.b64encode(os.urandom(32)).decode())'"
            ) from None
        if not SECRET_BYTES[0] <= len(key) <= SECRET_BYTES[1]:
            raise SubsError(f"{which} holds {len(key)} bytes; use {SECRET_BYTES[0]} to {SECRET_BYTES[1]} random bytes")
        keys.append(key)
    return tuple(keys)


def signature_headers(keys: tuple[bytes, ...], message_id: str, body: bytes, now: float) -> dict[str, str]:
    """Standard Webhooks' three headers for ``body`` sent at ``now``."""
    timestamp = str(int(now))
    signed = f"{message_id}.{timestamp}.".encode() + body
    signatures = (base64.b64encode(hmac.digest(key, signed, hashlib.sha256)).decode("ascii") for key in keys)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": " ".join(f"v1,{signature}" for signature in signatures),
    }


def _split_credentials(url: str) -> tuple[str, str | None]:
    """The URL without ``user:pass@`` and the basic-auth header value for it, if any."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None
    userinfo = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    auth = "Basic " + base64.b64encode(userinfo.encode()).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])), auth


def _target(tag: str, settings: Mapping[str, Any]) -> Target:
    url = settings.get("url")
    if not url:
        raise SubsError(
            f'handler {tag!r} has no url: set [handlers.{tag}] url = "https://..." in subs.toml '
            f"or the environment variable SUBS__{tag.upper()}__URL"
        )
    scheme = url_setting(tag, str(url), ("http", "https")).scheme
    timeout = positive_setting(tag, settings, "timeout", DEFAULT_TIMEOUT)
    headers = _headers(tag, settings.get("headers", {}))
    secret = settings.get("secret")
    keys = _keys(tag, secret) if secret is not None else ()
    tls_files = _tls_files(tag, settings, scheme)
    return Target(str(url), timeout, headers, keys, tls_files)


def _headers(tag: str, given: object) -> dict[str, str]:
    """The extra headers, checked: one the HTTP client would refuse (a bad
    name, a line break in a value) would fail every attempt, and one subs or
    the client writes would be dropped or break the request."""
    if not isinstance(given, Mapping):
        raise SubsError(f'[handlers.{tag}] headers must be a table, e.g. headers = {{ X-Token = "..." }}')
    own = {name.lower(): name for name in _NOT_YOURS}
    headers: dict[str, str] = {}
    for name, value in given.items():
        if not _HEADER_NAME.fullmatch(name):
            raise SubsError(f"[handlers.{tag}] headers: {name!r} is not a header name; use letters, digits and '-'")
        if name.lower() in own:
            raise SubsError(f"[handlers.{tag}] headers: {own[name.lower()]} is written by subs or HTTP; leave it out")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise SubsError(f"[handlers.{tag}] headers: {name} must be text, not {type(value).__name__}")
        if any(character in str(value) for character in "\r\n\0"):
            raise SubsError(f"[handlers.{tag}] headers: {name}'s value holds a line break; an HTTP header cannot")
        headers[name] = str(value)
    return headers


def _tls_files(tag: str, settings: Mapping[str, Any], scheme: str) -> tuple[str | None, str | None, str | None]:
    """The TLS settings, checked: a file that is missing or not what its
    setting says is a start-up error."""
    files = {name: tls.file_setting(tag, settings, name) for name in tls.FILES}
    given = [name for name, path in files.items() if path is not None]
    if given and scheme != "https":
        raise SubsError(f"[handlers.{tag}] {', '.join(given)}: for https:// urls only")
    if files["client_key"] and not files["client_cert"]:
        raise SubsError(f"[handlers.{tag}] client_key needs client_cert, the certificate it goes with")
    return files["ca_file"], files["client_cert"], files["client_key"]


def _check_transport(tag: str, target: Target) -> None:
    """Build the target's connections now: a TLS file or proxy that cannot
    work is a start-up error."""
    from . import webhook_http  # here: see its docstring

    try:
        webhook_http.pool(target.url, target.tls)
    except tls.SettingError as exc:
        raise tls.start_up_error(tag, exc) from None


def _retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header asks us to wait (delay-seconds or an
    HTTP date), at most MAX_RETRY_AFTER; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # "-0000": RFC 5322's unknown zone, which HTTP dates mean as UTC
            when = when.replace(tzinfo=dt.timezone.utc)
        seconds = (when - dt.datetime.now(dt.timezone.utc)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def post(event: Event, settings: Mapping[str, Any]) -> None:
    """POST the event; raise unless the server answers 2xx within the timeout."""
    target = _target(event.tag, settings)
    url, auth = _split_credentials(target.url)
    body = event.to_json().encode("utf-8")
    headers = {
        "User-Agent": f"subs/{__version__}",
        **target.headers,
        "Content-Type": "application/json",
        "X-Subs-Event-Id": str(event.id),
        "X-Subs-Attempt": str(event.attempt),
    }
    if auth:
        headers["Authorization"] = auth
    if target.keys:
        headers.update(signature_headers(target.keys, event.idempotency_key, body, time.time()))
    # Messages name the URL without its query string, which may hold a token.
    shown = urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(query="", fragment=""))
    from . import webhook_http  # here: see its docstring

    try:
        response = webhook_http.post(url, target.tls, body, headers, target.timeout)
    except webhook_http.NoAnswer as exc:
        raise RuntimeError(f"webhook {shown}: {exc}") from None
    if 200 <= response.status < 300:
        return
    failure = f"webhook {shown}: HTTP {response.status} {response.reason}"
    if response.status == _TOO_LARGE:
        raise Undeliverable(
            f"{failure} for a body of {len(body):,} bytes; raise the receiver's limit, then `subs retry`"
        )
    wait = _retry_after(response.headers.get("Retry-After")) if response.status in _THROTTLED else None
    if wait is not None:
        raise RetryLater(f"{failure}; Retry-After {wait:g} s", wait)
    raise RuntimeError(failure)


@hookimpl
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, settings in tables_using("webhook", config).items():
        check_setting_names(tag, settings, "webhook", SETTINGS)
        _check_transport(tag, _target(tag, settings))  # a missing url or file: a start-up error, not retries
    register("webhook", lambda event: post(event, config.get(event.tag, {})))
