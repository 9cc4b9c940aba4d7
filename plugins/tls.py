"""TLS contexts for the built-in handlers that talk to servers of their own
(webhook, send_email): the system's authorities or a ``ca_file``, and a
client certificate when a server asks for one."""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping
from typing import Any

from subscriptions.errors import SubsError

FILES = ("ca_file", "client_cert", "client_key")


class SettingError(ValueError):
    """A setting that cannot work: ``args`` are the setting's name and what
    is wrong, for a start-up error."""


def file_setting(tag: str, settings: Mapping[str, Any], name: str) -> str | None:
    """A PEM file setting of ``[handlers.TAG]``: None when unset."""
    value = settings.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise SubsError(f'[handlers.{tag}] {name} must be the path of a PEM file, e.g. "/etc/subs/{name}.pem"')
    return value


def start_up_error(tag: str, error: SettingError) -> SubsError:
    """The one-line error for a setting of ``[handlers.TAG]`` that cannot work."""
    name, reason = error.args
    return SubsError(f"[handlers.{tag}] {name}: {reason}")


@functools.cache
def context(ca_file: str | None, client_cert: str | None = None, client_key: str | None = None) -> ssl.SSLContext:
    """Trusts ``ca_file`` (else the system's authorities) and shows
    ``client_cert``; built once per process, as loading the files costs
    more than a request."""
    for name, path in zip(FILES, (ca_file, client_cert, client_key), strict=True):
        if path is not None and not os.path.isfile(path):
            raise SettingError(name, f"{path} is not a file")
    try:
        built = ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as exc:
        raise SettingError("ca_file", f"{ca_file} holds no PEM certificate ({exc.reason})") from None
    except OSError as exc:  # not readable by this user
        raise SettingError("ca_file", f"{ca_file}: {exc.strerror}") from None
    if client_cert:
        which = "client_cert and client_key" if client_key else "client_cert"
        try:
            built.load_cert_chain(client_cert, client_key)
        except ssl.SSLError as exc:
            raise SettingError(which, f"not a PEM certificate and its private key ({exc.reason or exc})") from None
        except OSError as exc:
            raise SettingError(which, str(exc.strerror)) from None
    return built


def untrusted(error: BaseException) -> str | None:
    """For a failed certificate check, what to say (and do) about it."""
    if not isinstance(error, ssl.SSLCertVerificationError):
        return None
    return f"{error.verify_message}: the server's certificate is not trusted (set ca_file to its authority)"
