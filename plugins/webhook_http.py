"""The webhook's HTTP connections. Each handler process keeps one urllib3
pool per TLS setting and proxy, so a receiver's connection, and its TLS
handshake, serves event after event: a new one per event costs two more
round trips. Proxies come from the environment as for curl and urllib:
``http_proxy``, ``https_proxy`` and ``no_proxy``.

Imported only where a webhook is configured: every handler process loads
the built-in plugins, and urllib3 costs each about 90 ms and 2 MB to load."""

from __future__ import annotations

import functools
import os
import urllib.parse
import urllib.request

import urllib3

from . import tls


@functools.cache
def _pool(files: tuple[str | None, str | None, str | None], proxy: str | None) -> urllib3.PoolManager:
    """Connections that follow no redirect and retry nothing (a failed
    attempt is the listener's to retry), through ``proxy`` if given."""
    context = tls.context(*files)
    if proxy is None:
        return urllib3.PoolManager(ssl_context=context, retries=False)
    if "://" not in proxy:
        proxy = f"http://{proxy}"
    parts = urllib3.util.parse_url(proxy)
    if parts.scheme not in ("http", "https"):
        raise tls.SettingError(
            "proxy", f"the environment names a {parts.scheme}:// proxy (http_proxy / https_proxy); use an http:// one"
        )
    headers = urllib3.make_headers(proxy_basic_auth=urllib.parse.unquote(parts.auth)) if parts.auth else None
    return urllib3.ProxyManager(
        parts._replace(auth=None).url, proxy_headers=headers, ssl_context=context, retries=False
    )


def pool(url: str, files: tuple[str | None, str | None, str | None]) -> urllib3.PoolManager:
    """The pool for ``url`` with the TLS ``files`` (ca_file, client_cert,
    client_key): through the environment's proxy for its scheme unless
    ``no_proxy`` names its host."""
    parts = urllib.parse.urlsplit(url)
    return _pool(files, _proxy(parts.scheme, parts.hostname or ""))


def _proxy(scheme: str, host: str) -> str | None:
    """The environment's proxy for ``scheme``, unless ``no_proxy`` names
    ``host``, read as urllib reads them (lower case first); the common case,
    no proxy, without going through the whole environment (0.4 ms a request)."""
    proxy = os.environ.get(f"{scheme}_proxy") or os.environ.get(f"{scheme.upper()}_PROXY")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy


class NoAnswer(Exception):
    """A request that got no answer; the message says why."""


def post(
    url: str, files: tuple[str | None, str | None, str | None], body: bytes, headers: dict[str, str], timeout: float
) -> urllib3.BaseHTTPResponse:
    """POST ``body``; the server's answer, whatever its status."""
    try:
        return pool(url, files).request(
            "POST", url, body=body, headers=headers, timeout=timeout, redirect=False, retries=False
        )
    except urllib3.exceptions.HTTPError as exc:
        raise NoAnswer(_reason(exc, timeout)) from None


def _reason(error: urllib3.exceptions.HTTPError, timeout: float) -> str:
    """What a request that got no answer failed with, for the attempt's error."""
    # urllib3 keeps the socket's error as the cause, or (an SSLError) as its argument.
    cause = next((e for e in (error.__cause__, *error.args) if isinstance(e, OSError)), error)
    # NewConnectionError is a ConnectTimeoutError, for urllib3 1.x's sake: a refusal is no timeout.
    if isinstance(error, urllib3.exceptions.TimeoutError) and not isinstance(cause, ConnectionError):
        return f"no answer within {timeout:g} s"
    if (untrusted := tls.untrusted(cause)) is not None:
        return untrusted
    if isinstance(error, urllib3.exceptions.ProxyError):
        return f"through the proxy: {cause}"
    return str(cause)
