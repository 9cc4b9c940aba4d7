"""Tag ``send_email``: mails each event over SMTP.

Settings (``[handlers.send_email]`` in subs.toml, or ``SUBS__SEND_EMAIL__<KEY>``):

``from`` (required)
    The sender address.
``to`` (required)
    A recipient address, a list of them, or a comma-separated string.
``subject``
    A format string over the event's fields (id, table, action, tag, pk, old,
    new, attempt, created_at, subscription_id); default ``"subs: {table} {action} {pk}"``.
``host``, ``port``
    The SMTP server (default ``localhost``, 25).
``starttls``
    ``true`` to switch to TLS (STARTTLS) before logging in; default false.
``username``, ``password``
    Log in with these when ``username`` is set. The password is never logged.
``timeout``
    Seconds allowed for each network operation (default 10).

The body is the event as indented JSON. A refused recipient or message, a
failed login or an unreachable server is a failure, retried later.
"""

from __future__ import annotations

import datetime as dt
import smtplib
import ssl
from collections.abc import Callable, Mapping
from email.message import EmailMessage
from typing import Any

from subscriptions import hookimpl
from subscriptions.config import positive_setting, tables_using
from subscriptions.errors import SubsError
from subscriptions.events import Event, dumps

DEFAULT_SUBJECT = "subs: {table} {action} {pk}"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _flag(tag: str, settings: Mapping[str, Any], key: str) -> bool:
    value = settings.get(key, False)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in _TRUE | _FALSE:
        raise SubsError(f"[handlers.{tag}] {key} must be true or false, not {value!r}")
    return text in _TRUE


def _recipients(tag: str, settings: Mapping[str, Any]) -> list[str]:
    value = settings.get("to") or []
    addresses = value.split(",") if isinstance(value, str) else [str(a) for a in value]
    addresses = [a.strip() for a in addresses if a.strip()]
    if not addresses:
        raise SubsError(
            f'handler {tag!r} has no recipient: set [handlers.{tag}] to = "ops@example.com" in subs.toml '
            f"or the environment variable SUBS__{tag.upper()}__TO"
        )
    return addresses


def message(event: Event, settings: Mapping[str, Any]) -> EmailMessage:
    """The mail for one event, checked against the settings before any network use."""
    tag = event.tag
    sender = settings.get("from")
    if not sender:
        raise SubsError(
            f'handler {tag!r} has no sender: set [handlers.{tag}] from = "subs@example.com" in subs.toml '
            f"or the environment variable SUBS__{tag.upper()}__FROM"
        )
    fields = event.as_dict()
    try:
        subject = str(settings.get("subject", DEFAULT_SUBJECT)).format(**fields)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise SubsError(
            f"[handlers.{tag}] subject is not a valid format string ({type(exc).__name__}: {exc}); "
            f"fields: {', '.join(fields)}"
        ) from None
    mail = EmailMessage()
    mail["From"] = str(sender)
    mail["To"] = ", ".join(_recipients(tag, settings))
    mail["Subject"] = " ".join(subject.split())  # captured values may hold line breaks
    mail.set_content(dumps(fields, indent=2) + "\n")
    return mail


def _sample_event(tag: str) -> Event:
    """An event with every field, to check the settings against at start-up."""
    return Event(
        id=1,
        table="T",
        action="I",
        tag=tag,
        pk={"ID": 1},
        old=None,
        new={"ID": 1},
        attempt=1,
        created_at=dt.datetime.now(),
    )


def _describe(exc: Exception) -> str:
    """The server's answer without the Python noise; never includes the password."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return "; ".join(
            f"{to} refused: {code} {text.decode(errors='replace')}" for to, (code, text) in exc.recipients.items()
        )
    if isinstance(exc, smtplib.SMTPResponseException):
        text = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else exc.smtp_error
        return f"{exc.smtp_code} {text}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


def _server(tag: str, settings: Mapping[str, Any]) -> tuple[str, int, float, bool]:
    host = str(settings.get("host", "localhost"))
    port = positive_setting(tag, settings, "port", 25, int, maximum=65535)
    timeout = positive_setting(tag, settings, "timeout", 10)
    return host, port, timeout, _flag(tag, settings, "starttls")


def send(event: Event, settings: Mapping[str, Any]) -> None:
    """Send the event's mail; raise unless the server accepts it for every recipient."""
    tag = event.tag
    mail = message(event, settings)
    host, port, timeout, starttls = _server(tag, settings)
    username = settings.get("username")
    try:
        with smtplib.SMTP(host, port, timeout=timeout) as smtp:
            if starttls:
                smtp.starttls(context=ssl.create_default_context())
            if username:
                smtp.login(str(username), str(settings.get("password", "")))
            refused = smtp.send_message(mail)
    except (smtplib.SMTPException, OSError) as exc:
        raise RuntimeError(f"send_email via {host}:{port}: {_describe(exc)}") from None
    if refused:
        raise RuntimeError(f"send_email via {host}:{port}: {_describe(smtplib.SMTPRecipientsRefused(refused))}")


@hookimpl
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, settings in tables_using("send_email", config).items():
        # Bad settings are a start-up error, not a retried failure.
        message(_sample_event(tag), settings)
        _server(tag, settings)
    register("send_email", lambda event: send(event, config.get(event.tag, {})))
