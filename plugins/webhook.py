"""Tag ``webhook``: POSTs each event as JSON to a URL.

Settings (``[handlers.webhook]`` in subs.toml, or ``SUBS__WEBHOOK__<KEY>``):

``url`` (required)
    Where to POST. Credentials in the URL (``https://user:pass@host/...``) are
    sent as HTTP basic authentication and never shown in messages.
``timeout``
    Seconds to wait for the connection and for each read (default 10).
``headers``
    A table of extra request headers, e.g. ``headers = { Authorization = "Bearer ..." }``.

The body is ``Event.to_json()``, with the headers ``X-Subs-Event-Id`` and
``X-Subs-Attempt``. Any 2xx status is a delivery; any other status (redirects
are not followed), a connection error or a timeout is a failure, retried later.
A 429 or 503 answer's ``Retry-After`` (seconds or an HTTP date, up to an hour)
is honoured: the next attempt waits at least that long.
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import http.client
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from subscriptions import hookimpl
from subscriptions.config import positive_setting, tables_using
from subscriptions.errors import RetryLater, SubsError
from subscriptions.events import Event

DEFAULT_TIMEOUT = 10.0
# Statuses whose Retry-After says when the receiver wants us back (RFC 9110, RFC 6585).
_THROTTLED = (429, 503)
# A longer Retry-After is taken as this: a receiver's mistake should not park events for days.
MAX_RETRY_AFTER = 3600.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirected POST would turn into a GET without the event: report the 3xx instead."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def _split_credentials(url: str) -> tuple[str, str | None]:
    """The URL without ``user:pass@`` and the basic-auth header value for it, if any."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None
    userinfo = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    auth = "Basic " + base64.b64encode(userinfo.encode()).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])), auth


def _settings(tag: str, settings: Mapping[str, Any]) -> tuple[str, float, dict[str, str]]:
    url = settings.get("url")
    if not url:
        raise SubsError(
            f'handler {tag!r} has no url: set [handlers.{tag}] url = "https://..." in subs.toml '
            f"or the environment variable SUBS__{tag.upper()}__URL"
        )
    if urllib.parse.urlsplit(str(url)).scheme not in ("http", "https"):
        raise SubsError(f"[handlers.{tag}] url must start with http:// or https://")
    timeout = positive_setting(tag, settings, "timeout", DEFAULT_TIMEOUT)
    headers = settings.get("headers", {})
    if not isinstance(headers, Mapping):
        raise SubsError(f'[handlers.{tag}] headers must be a table, e.g. headers = {{ X-Token = "..." }}')
    return str(url), timeout, {str(k): str(v) for k, v in headers.items()}


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
    url, timeout, extra = _settings(event.tag, settings)
    url, auth = _split_credentials(url)
    headers = {
        **extra,
        "Content-Type": "application/json",
        "X-Subs-Event-Id": str(event.id),
        "X-Subs-Attempt": str(event.attempt),
    }
    if auth:
        headers["Authorization"] = auth
    request = urllib.request.Request(url, event.to_json().encode("utf-8"), headers, method="POST")
    # Messages name the URL without its query string, which may hold a token.
    shown = urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(query="", fragment=""))
    try:
        with _opener.open(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        exc.close()
        failure = f"webhook {shown}: HTTP {exc.code} {exc.reason}"
        wait = _retry_after(exc.headers.get("Retry-After")) if exc.code in _THROTTLED else None
        if wait is not None:
            raise RetryLater(f"{failure}; Retry-After {wait:g} s", wait) from None
        raise RuntimeError(failure) from None
    except (OSError, http.client.HTTPException) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError):
            reason = f"no answer within {timeout:g} s"
        raise RuntimeError(f"webhook {shown}: {reason}") from None


@hookimpl
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, settings in tables_using("webhook", config).items():
        _settings(tag, settings)  # a missing url is a start-up error, not a retried failure
    register("webhook", lambda event: post(event, config.get(event.tag, {})))
