"""The send_email handler against a real SMTP server on 127.0.0.1
(aiosmtpd): the mail it sends, the session it keeps from one mail to the
next, TLS (STARTTLS and implicit, with certificates made by trustme),
login, and the settings it refuses at start-up. No database is needed."""

from __future__ import annotations

import contextlib
import datetime as dt
import email
import email.policy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from subscriptions.errors import SubsError, Undeliverable
from subscriptions.testing import deliver, load_handlers, make_event

from certificates import Pki
from conftest import free_port

LOOPBACK = "127.0.0.1"


def handler(tag: str, settings: dict[str, Any]):
    """The function the listener would call for ``tag`` with these settings."""
    return load_handlers(config={tag: settings})[tag]


def mail_settings(port: int, **more: Any) -> dict[str, Any]:
    return {"host": LOOPBACK, "port": port, "from": "subs@example.com", "to": "a@example.com", "timeout": 5, **more}


class MailSink:
    """An aiosmtpd handler keeping what it accepts, and the address of the
    session each mail came in (one per connection); refuses recipients
    named nobody@."""

    def __init__(self) -> None:
        self.envelopes: list[Any] = []
        self.sessions: list[Any] = []

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if address.startswith("nobody@"):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        self.sessions.append(session.peer)
        return "250 OK"


@contextlib.contextmanager
def smtp_server(**options: Any) -> Iterator[tuple[MailSink, int]]:
    """A real SMTP server (aiosmtpd); ``options`` go to its Controller
    (implicit TLS) and its sessions (STARTTLS, login, idle timeout)."""
    sink = MailSink()
    controller = Controller(sink, hostname=LOOPBACK, port=free_port(), **options)
    controller.start()
    try:
        yield sink, controller.port
    finally:
        controller.stop()


@pytest.fixture
def smtp_peer() -> Iterator[tuple[MailSink, int]]:
    with smtp_server() as peer:
        yield peer


def test_send_email_delivers_json_body(smtp_peer: tuple[MailSink, int]) -> None:
    sink, port = smtp_peer
    settings = {
        "host": LOOPBACK,
        "port": str(port),
        "from": "subs@example.com",
        "to": "a@example.com, b@example.com",
        "starttls": "false",
        "timeout": "5",
    }
    event = make_event("send_email", table="ORDERS", action="U", id=7, new={"ID": 7, "DAY": dt.date(2024, 1, 2)})
    deliver(handler("send_email", settings), event)
    [envelope] = sink.envelopes
    assert envelope.mail_from == "subs@example.com"
    assert envelope.rcpt_tos == ["a@example.com", "b@example.com"]
    mail = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert mail["Subject"] == "subs: ORDERS U {'ID': 7}"
    assert mail["To"] == "a@example.com, b@example.com"
    body = json.loads(mail.get_content())
    assert body["id"] == 7 and body["new"] == {"ID": 7, "DAY": "2024-01-02"}


def test_send_email_formats_subject_and_accepts_recipient_list(smtp_peer: tuple[MailSink, int]) -> None:
    sink, port = smtp_peer
    settings = mail_settings(port, to=["ops@example.com"], subject="{tag}: {table}#{id} attempt {attempt}")
    deliver(handler("send_email", settings), make_event("send_email", table="T\nX", id=5, attempt=2))
    mail = email.message_from_bytes(sink.envelopes[0].content, policy=email.policy.default)
    assert mail["Subject"] == "send_email: T X#5 attempt 2"


def test_addresses_with_names_quoted_commas_or_no_domain_reach_the_envelope(smtp_peer: tuple[MailSink, int]) -> None:
    sink, port = smtp_peer
    settings = mail_settings(port, to='root, "Doe, Jane" <jane@example.com>', **{"from": "Subs <subs@example.com>"})
    deliver(handler("send_email", settings), make_event("send_email"))
    envelope = sink.envelopes[0]
    assert envelope.mail_from == "subs@example.com"
    assert envelope.rcpt_tos == ["root", "jane@example.com"]
    mail = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert [a.display_name for a in mail["To"].addresses] == ["", "Doe, Jane"]


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"from": "not an address"}, "from: 'not an address' is not an email address (local-part is not"),
        ({"from": "subs@"}, "from: 'subs@' is not an email address (unreadable: IndexError)"),
        ({"from": "<>"}, "from: '<>' is not an email address (null addr-spec in angle-addr)"),
        ({"from": "a@example.com, b@example.com"}, "from: one sender, not 2: a@example.com, b@example.com"),
        ({"from": ["a@example.com"] * 2}, "from: one sender, not 2"),
        ({"from": 42}, "from must be an address or a list of them, not 42"),
        ({"to": "ops@example.com; dev@example.com"}, "to: 'ops@example.com; dev@example.com' is not an email address"),
        ({"to": ["ops@example.com", 5]}, "to must be an address or a list of them, not ['ops@example.com', 5]"),
        ({"to": "ops@@example.com"}, "to: 'ops@@example.com' is not an email address (invalid address in"),
        ({"username": "subs"}, "username is set but password is not"),
        ({"password": "s3cret"}, "password is set but username is not"),
    ],
)
def test_settings_a_server_could_not_use_are_refused_at_start_up(settings: dict, fragment: str) -> None:
    """Before, each of these failed every event (or sent unsigned-in, or
    with an empty password) instead of stopping `subs listen` at once."""
    with pytest.raises(SubsError) as error:
        load_handlers(config={"send_email": {**mail_settings(25), **settings}})
    assert str(error.value).startswith("[handlers.send_email] "), str(error.value)
    assert fragment in str(error.value), str(error.value)
    assert "s3cret" not in str(error.value)


def test_send_email_fails_when_recipient_refused(smtp_peer: tuple[MailSink, int]) -> None:
    sink, port = smtp_peer
    settings = mail_settings(port, to="nobody@example.com")
    with pytest.raises(RuntimeError, match="nobody@example.com refused: 550 5.1.1 no such user"):
        deliver(handler("send_email", settings), make_event("send_email"))
    assert sink.envelopes == []


def test_a_mail_over_the_servers_size_limit_is_undeliverable() -> None:
    with smtp_server(data_size_limit=2_000) as (sink, port):
        event = make_event("send_email", new={"NOTE": "x" * 5_000})
        with pytest.raises(Undeliverable, match="552 .*size.*raise the server's limit, then `subs retry`$"):
            deliver(handler("send_email", mail_settings(port)), event)
        deliver(handler("send_email", mail_settings(port)), make_event("send_email"))
    assert len(sink.envelopes) == 1


def test_send_email_fails_when_nothing_listens() -> None:
    port = free_port()
    settings = mail_settings(port, timeout=2)
    with pytest.raises(RuntimeError, match=rf"send_email via 127\.0\.0\.1:{port}: .*refused"):
        deliver(handler("send_email", settings), make_event("send_email"))


def test_send_email_settings_errors_name_the_tag() -> None:
    with pytest.raises(SubsError, match=r"\[handlers\.send_email\] from = .*SUBS__SEND_EMAIL__FROM"):
        deliver(handler("send_email", {"to": "a@example.com"}), make_event("send_email"))
    with pytest.raises(SubsError, match=r"starttls must be true or false"):
        deliver(
            handler("send_email", {"from": "s@example.com", "to": "a@example.com", "starttls": "maybe"}),
            make_event("send_email"),
        )
    with pytest.raises(SubsError, match=r"subject is not a valid format string"):
        deliver(
            handler("send_email", {"from": "s@example.com", "to": "a@example.com", "subject": "{nope}"}),
            make_event("send_email"),
        )


def test_one_session_carries_mail_after_mail(smtp_peer: tuple[MailSink, int]) -> None:
    sink, port = smtp_peer
    send = handler("send_email", mail_settings(port))
    for number in range(1, 4):
        deliver(send, make_event("send_email", id=number))
    assert len(sink.envelopes) == 3 and len(set(sink.sessions)) == 1, sink.sessions


def test_a_session_the_server_closed_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ends idle sessions after 1 s. Sent 1.5 s later, the next
    mail finds the session closed without having asked (CHECK_AFTER_IDLE
    is 5 s) and goes in a new one; asked (NOOP) at once, it goes in a new
    one as well. Each mail arrives once."""
    with smtp_server(timeout=1) as (sink, port):
        send = handler("send_email", mail_settings(port))
        deliver(send, make_event("send_email", id=1))
        time.sleep(1.5)
        deliver(send, make_event("send_email", id=2))
        monkeypatch.setattr("subscriptions.builtin.send_email.CHECK_AFTER_IDLE", 0.0)
        time.sleep(1.5)
        deliver(send, make_event("send_email", id=3))
    mails = [email.message_from_bytes(mail.content, policy=email.policy.default) for mail in sink.envelopes]
    assert [json.loads(mail.get_content())["id"] for mail in mails] == [1, 2, 3]
    assert len(set(sink.sessions)) == 3


def check_login(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
    good = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (b"subs", b"s3cret")
    return AuthResult(success=good, handled=False)  # not handled: the server answers 535 itself


def test_starttls_then_login(pki: Pki) -> None:
    options = {"tls_context": pki.server(), "require_starttls": True, "authenticator": check_login}
    with smtp_server(**options) as (sink, port):
        settings = mail_settings(port, starttls=True, ca_file=pki.ca_file, username="subs", password="s3cret")
        deliver(handler("send_email", settings), make_event("send_email"))
        assert len(sink.envelopes) == 1
        wrong = {**settings, "password": "not-it"}
        with pytest.raises(RuntimeError, match=r"send_email via 127\.0\.0\.1:\d+: 535 ") as failure:
            deliver(handler("send_email", wrong), make_event("send_email"))
        assert "not-it" not in str(failure.value)
        untrusted = {**settings, "ca_file": None}
        with pytest.raises(RuntimeError, match=r"certificate is not trusted \(set ca_file to its authority\)"):
            deliver(handler("send_email", untrusted), make_event("send_email"))
    assert len(sink.envelopes) == 1


def test_implicit_tls_on_its_own_port(pki: Pki) -> None:
    with smtp_server(ssl_context=pki.server()) as (sink, port):
        deliver(handler("send_email", mail_settings(port, ssl="true", ca_file=pki.ca_file)), make_event("send_email"))
        with pytest.raises(RuntimeError, match=r"send_email via 127\.0\.0\.1:\d+: "):
            deliver(handler("send_email", mail_settings(port)), make_event("send_email"))  # no TLS spoken
    assert len(sink.envelopes) == 1
    default_port = {name: value for name, value in mail_settings(0, ssl=True).items() if name != "port"}
    with pytest.raises(RuntimeError, match=r"send_email via 127\.0\.0\.1:465: "):
        deliver(handler("send_email", default_port), make_event("send_email"))


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"ssl": True, "starttls": True}, "starttls and ssl exclude each other: ssl for port 465, starttls for 587"),
        ({"ca_file": "{tmp}/ca_file.pem"}, "ca_file: for starttls or ssl only"),
        ({"ssl": True, "ca_file": "{tmp}/absent.pem"}, "ca_file: {tmp}/absent.pem is not a file"),
        ({"ssl": True, "ca_file": "{tmp}/client_key.pem"}, "ca_file: {tmp}/client_key.pem holds no PEM certificate"),
        ({"ssl": "sometimes"}, "ssl must be true or false"),
    ],
)
def test_bad_tls_settings_are_refused_at_start_up(pki: Pki, tmp_path, settings: dict, fragment: str) -> None:
    given = {**mail_settings(25), **settings}
    given = {name: value.format(tmp=tmp_path) if isinstance(value, str) else value for name, value in given.items()}
    with pytest.raises(SubsError) as error:
        load_handlers(config={"send_email": given})
    assert str(error.value).startswith("[handlers.send_email] ")
    assert fragment.format(tmp=tmp_path) in str(error.value), str(error.value)
