"""Tag ``send_email``: mails each event over SMTP.

Settings (``[handlers.send_email]`` in subs.toml, or ``SUBS__SEND_EMAIL__<KEY>``):

``from`` (required)
    The sender address: ``subs@example.com`` or ``Subs <subs@example.com>``.
``to`` (required)
    A recipient address, a list of them, or a comma-separated string.
    An address without a domain (``root``) is for a local server, which
    adds its own; one the server could not take is a start-up error.
``subject``
    A format string over the event's fields (id, table, action, tag, pk, old,
    new, attempt, created_at, subscription_id); default ``"subs: {table} {action} {pk}"``.
``host``, ``port``
    The SMTP server (default ``localhost``, and port 25, or 465 with ``ssl``).
``starttls``
    ``true`` to switch to TLS (STARTTLS) before logging in; default false.
``ssl``
    ``true`` to speak TLS from the start (SMTPS, "implicit TLS", port 465);
    default false. Not with ``starttls``.
``ca_file``
    With ``starttls`` or ``ssl``: a PEM file of the certificate authorities
    to trust instead of the system's.
``username``, ``password``
    Log in with these; set both or neither. The password is never logged;
    ``SUBS__SEND_EMAIL__PASSWORD`` keeps it out of subs.toml.
``timeout``
    Seconds allowed for each network operation (default 10).

The body is the event as indented JSON. A refused recipient or message, a
failed login or an unreachable server is a failure, retried later; a mail
the server refuses for its size (552) is undeliverable: the event goes dead
at once (``subs retry`` after the server's limit is raised). Each
handler process keeps its session with the server from one mail to the next
(a server that closed it meanwhile gets a new one), so a mail costs no new
connection, TLS handshake or login.
"""

from __future__ import annotations

import atexit
import datetime as dt
import email.errors
import smtplib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from subscriptions import hookimpl
from subscriptions.config import check_setting_names, positive_setting, tables_using
from subscriptions.errors import SubsError, Undeliverable
from subscriptions.events import Event, dumps

from . import tls

SETTINGS = ("from", "to", "subject", "host", "port", "starttls", "ssl", "ca_file", "username", "password", "timeout")
DEFAULT_SUBJECT = "subs: {table} {action} {pk}"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# A session idle this long is checked (NOOP) before a mail: servers close idle ones.
CHECK_AFTER_IDLE = 5.0
# The SMTP reply to a mail over the server's size limit (RFC 5321, 1870).
MESSAGE_TOO_LARGE = 552
# The one flaw the email package finds that an address may have: a local
# server qualifies an address without a domain ("root") with its own.
_NO_DOMAIN = "addr-spec local part with no domain"


def _flag(tag: str, settings: Mapping[str, Any], key: str) -> bool:
    value = settings.get(key, False)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in _TRUE | _FALSE:
        raise SubsError(f"[handlers.{tag}] {key} must be true or false, not {value!r}")
    return text in _TRUE


def _addresses(tag: str, key: str, value: Any) -> list[str]:
    """The addresses setting ``key`` holds, as header text: one a server
    could not take (no address at all, stray words, a lone ``@``) is a
    start-up error rather than a failure of every event."""
    texts = [value] if isinstance(value, str) else value if isinstance(value, list) else None
    if texts is None or not all(isinstance(text, str) for text in texts):
        raise SubsError(f"[handlers.{tag}] {key} must be an address or a list of them, not {value!r}")
    found: list[str] = []
    for text in (text for text in texts if text.strip()):
        probe = EmailMessage()
        try:
            probe[key] = text
            header = probe[key]
            addresses, flaws = header.addresses, [str(d) for d in header.defects if str(d) != _NO_DOMAIN]
        except (email.errors.HeaderParseError, IndexError, ValueError) as exc:
            addresses, flaws = (), [f"unreadable: {type(exc).__name__}"]
        if flaws or not all(address.addr_spec.strip("<>") for address in addresses):
            raise SubsError(
                f"[handlers.{tag}] {key}: {text!r} is not an email address ({(flaws or ['empty'])[0]}); "
                'write name@example.com or "Name <name@example.com>"'
            )
        found += [str(address) for address in addresses]
    return found


def _sender(tag: str, settings: Mapping[str, Any]) -> str:
    senders = _addresses(tag, "from", settings.get("from") or [])
    if not senders:
        raise SubsError(
            f'handler {tag!r} has no sender: set [handlers.{tag}] from = "subs@example.com" in subs.toml '
            f"or the environment variable SUBS__{tag.upper()}__FROM"
        )
    if len(senders) > 1:
        raise SubsError(f"[handlers.{tag}] from: one sender, not {len(senders)}: {', '.join(senders)}")
    return senders[0]


def _recipients(tag: str, settings: Mapping[str, Any]) -> list[str]:
    addresses = _addresses(tag, "to", settings.get("to") or [])
    if not addresses:
        raise SubsError(
            f'handler {tag!r} has no recipient: set [handlers.{tag}] to = "ops@example.com" in subs.toml '
            f"or the environment variable SUBS__{tag.upper()}__TO"
        )
    return addresses


def message(event: Event, settings: Mapping[str, Any]) -> EmailMessage:
    """The mail for one event, checked against the settings before any network use."""
    tag = event.tag
    sender = _sender(tag, settings)
    fields = event.as_dict()
    try:
        subject = str(settings.get("subject", DEFAULT_SUBJECT)).format(**fields)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise SubsError(
            f"[handlers.{tag}] subject is not a valid format string ({type(exc).__name__}: {exc}); "
            f"fields: {', '.join(fields)}"
        ) from None
    mail = EmailMessage()
    mail["From"] = sender
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


@dataclass(frozen=True)
class Server:
    """Where and how mails go: what one kept session is for."""

    host: str
    port: int
    timeout: float
    mode: str  # "plain", "starttls" or "ssl"
    ca_file: str | None
    username: str | None
    password: str = field(repr=False)


def _server(tag: str, settings: Mapping[str, Any]) -> Server:
    starttls, implicit = _flag(tag, settings, "starttls"), _flag(tag, settings, "ssl")
    if starttls and implicit:
        raise SubsError(f"[handlers.{tag}] starttls and ssl exclude each other: ssl for port 465, starttls for 587")
    mode = "ssl" if implicit else "starttls" if starttls else "plain"
    ca_file = tls.file_setting(tag, settings, "ca_file")
    if ca_file is not None:
        if mode == "plain":
            raise SubsError(f"[handlers.{tag}] ca_file: for starttls or ssl only")
        try:
            tls.context(ca_file)
        except tls.SettingError as exc:
            raise tls.start_up_error(tag, exc) from None
    username, password = settings.get("username"), settings.get("password")
    if bool(username) != bool(password):
        given, missing = ("username", "password") if username else ("password", "username")
        raise SubsError(
            f"[handlers.{tag}] {given} is set but {missing} is not: the server needs both to log in, "
            f"and without a login neither (SUBS__{tag.upper()}__PASSWORD keeps the password out of subs.toml)"
        )
    host = str(settings.get("host", "localhost")).strip()
    if not host:  # smtplib would never connect, and every mail fail
        raise SubsError(f'[handlers.{tag}] host is empty; name the mail server, or leave host out for "localhost"')
    return Server(
        host=host,
        port=positive_setting(tag, settings, "port", 465 if implicit else 25, int, maximum=65535),
        timeout=positive_setting(tag, settings, "timeout", 10),
        mode=mode,
        ca_file=ca_file,
        username=str(username) if username else None,
        password=str(password or ""),
    )


class _Session:
    """One SMTP session, logged in, kept for the next mail."""

    def __init__(self, server: Server) -> None:
        context = tls.context(server.ca_file) if server.mode != "plain" else None
        if server.mode == "ssl":
            self.smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                server.host, server.port, timeout=server.timeout, context=context
            )
        else:
            self.smtp = smtplib.SMTP(server.host, server.port, timeout=server.timeout)
        try:
            if server.mode == "starttls":
                self.smtp.starttls(context=context)
            if server.username:
                self.smtp.login(server.username, server.password)
        except BaseException:
            self.close()
            raise
        self.used = time.monotonic()

    def alive(self) -> bool:
        """Whether the server still holds the session: asked (NOOP) only
        after CHECK_AFTER_IDLE, as asking costs a round trip."""
        if time.monotonic() - self.used < CHECK_AFTER_IDLE:
            return True
        try:
            alive = self.smtp.noop()[0] == 250
        except (smtplib.SMTPException, OSError):
            return False
        self.used = time.monotonic()
        return alive

    def close(self) -> None:
        try:
            self.smtp.quit()
        except (smtplib.SMTPException, OSError):
            self.smtp.close()


_sessions: dict[Server, _Session] = {}


@atexit.register
def _close_sessions() -> None:
    """Say goodbye (QUIT) on the way out, rather than leave the server to time out."""
    while _sessions:
        _sessions.popitem()[1].close()


def _session(server: Server) -> tuple[_Session, bool]:
    """The kept session for ``server`` (a new one if none is, or the server
    closed it), and whether it is new."""
    kept = _sessions.pop(server, None)
    if kept is not None and kept.alive():
        _sessions[server] = kept
        return kept, False
    if kept is not None:
        kept.close()
    _sessions[server] = _Session(server)
    return _sessions[server], True


def _send_in(session: _Session, server: Server, mail: EmailMessage) -> dict[str, tuple[int, bytes]]:
    """Send ``mail``; a session whose state is not known after a failure
    is closed, one where the server answered goes on (smtplib reset it)."""
    try:
        refused = session.smtp.send_message(mail)
    except (smtplib.SMTPResponseException, smtplib.SMTPRecipientsRefused):
        raise
    except (smtplib.SMTPException, OSError):
        del _sessions[server]
        session.close()
        raise
    session.used = time.monotonic()
    return refused


def _deliver(server: Server, mail: EmailMessage) -> dict[str, tuple[int, bytes]]:
    """Send ``mail`` in the kept session; once more in a new one when a kept
    session turns out closed: the server closes one between mails, before
    taking the next."""
    session, new = _session(server)
    try:
        return _send_in(session, server, mail)
    except smtplib.SMTPServerDisconnected:
        if new:
            raise
    session, _ = _session(server)
    return _send_in(session, server, mail)


def send(event: Event, settings: Mapping[str, Any]) -> None:
    """Send the event's mail; raise unless the server accepts it for every recipient."""
    mail = message(event, settings)
    server = _server(event.tag, settings)
    where = f"send_email via {server.host}:{server.port}"
    try:
        refused = _deliver(server, mail)
    except (smtplib.SMTPException, OSError) as exc:
        reason = tls.untrusted(exc) or _describe(exc)
        if isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code == MESSAGE_TOO_LARGE:
            size = len(mail.as_bytes())
            raise Undeliverable(
                f"{where}: {reason} (the mail is {size:,} bytes); raise the server's limit, then `subs retry`"
            ) from None
        raise RuntimeError(f"{where}: {reason}") from None
    if refused:
        raise RuntimeError(f"{where}: {_describe(smtplib.SMTPRecipientsRefused(refused))}")


@hookimpl
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, settings in tables_using("send_email", config).items():
        # Bad settings are a start-up error, not a retried failure.
        check_setting_names(tag, settings, "send_email", SETTINGS)
        message(_sample_event(tag), settings)
        _server(tag, settings)
    register("send_email", lambda event: send(event, config.get(event.tag, {})))
