"""The webhook's HTTP connections. Each handler process keeps one urllib3
pool per TLS setting and proxy, so a receiver's connection, and its TLS
handshake, serves event after event: a new one per event costs two more
round trips. Proxies come from the environment as for curl and urllib:
``http_proxy``, ``https_proxy`` and ``no_proxy``."""

from __future__ import annotations

import functools
import os
import ssl
import urllib.parse
import urllib.request

import urllib3

TLS_FILES = ("ca_file", "client_cert", "client_key")


class SettingError(ValueError):
    """A transport setting that cannot work: ``args`` are the setting's
    name and what is wrong, for a start-up error."""


@functools.cache
def _tls_context(ca_file: str | None, client_cert: str | None, client_key: str | None) -> ssl.SSLContext:
    """Trusts ``ca_file`` (else the system's authorities) and shows
    ``client_cert``; built once, as loading the files costs more than a request."""
    for name, path in zip(TLS_FILES, (ca_file, client_cert, client_key), strict=True):
        if path is not None and not os.path.isfile(path):
            raise SettingError(name, f"{path} is not a file")
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as exc:
        raise SettingError("ca_file", f"{ca_file} holds no PEM certificate ({exc.reason})") from None
    except OSError as exc:  # not readable by this user
        raise SettingError("ca_file", f"{ca_file}: {exc.strerror}") from None
    if client_cert:
        which = "client_cert and client_key" if client_key else "client_cert"
        try:
            context.load_cert_chain(client_cert, client_key)
        except ssl.SSLError as exc:
            raise SettingError(which, f"not a PEM certificate and its private key ({exc.reason or exc})") from None
        except OSError as exc:
            raise SettingError(which, str(exc.strerror)) from None
    return context


@functools.cache
def _pool(tls: tuple[str | None, str | None, str | None], proxy: str | None) -> urllib3.PoolManager:
    """Connections that follow no redirect and retry nothing (a failed
    attempt is the listener's to retry), through ``proxy`` if given."""
    context = _tls_context(*tls)
    if proxy is None:
        return urllib3.PoolManager(ssl_context=context, retries=False)
    if "://" not in proxy:
        proxy = f"http://{proxy}"
    parts = urllib3.util.parse_url(proxy)
    if parts.scheme not in ("http", "https"):
        raise SettingError("proxy", f"the environment's proxy for it is a {parts.scheme}:// URL; use http://")
    headers = urllib3.make_headers(proxy_basic_auth=urllib.parse.unquote(parts.auth)) if parts.auth else None
    return urllib3.ProxyManager(
        parts._replace(auth=None).url, proxy_headers=headers, ssl_context=context, retries=False
    )


def pool(url: str, tls: tuple[str | None, str | None, str | None]) -> urllib3.PoolManager:
    """The pool for ``url`` with the TLS files ``tls`` (ca_file,
    client_cert, client_key): through the environment's proxy for its
    scheme unless ``no_proxy`` names its host."""
    parts = urllib.parse.urlsplit(url)
    return _pool(tls, _proxy(parts.scheme, parts.hostname or ""))


def _proxy(scheme: str, host: str) -> str | None:
    """The environment's proxy for ``scheme``, unless ``no_proxy`` names
    ``host``, read as urllib reads them (lower case first); the common case,
    no proxy, without going through the whole environment (0.4 ms a request)."""
    proxy = os.environ.get(f"{scheme}_proxy") or os.environ.get(f"{scheme.upper()}_PROXY")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy


def reason(error: urllib3.exceptions.HTTPError, timeout: float) -> str:
    """What a request that got no answer failed with, for the attempt's error."""
    # urllib3 keeps the socket's error as the cause, or (an SSLError) as its argument.
    cause = next((e for e in (error.__cause__, *error.args) if isinstance(e, OSError)), error)
    # NewConnectionError is a ConnectTimeoutError, for urllib3 1.x's sake: a refusal is no timeout.
    if isinstance(error, urllib3.exceptions.TimeoutError) and not isinstance(cause, ConnectionError):
        return f"no answer within {timeout:g} s"
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"{cause.verify_message}: the receiver's certificate is not trusted (set ca_file to its authority)"
    if isinstance(error, urllib3.exceptions.ProxyError):
        return f"through the proxy: {cause}"
    return str(cause)
