"""Tag ``nats``: relays each event to a NATS JetStream stream.

Settings (``[handlers.nats]`` in subs.toml, or ``SUBS__NATS__<KEY>``):

``url`` (required)
    ``nats://host:4222``, or a list of servers of one cluster.
``user`` and ``password``, or ``token``, or ``creds`` (a credentials file)
    How to log in, if the server asks. Never logged or shown.
``subject``
    A format string over the event's fields (id, table, action, tag, pk, old,
    new, attempt, created_at, subscription_id, database_id); default
    ``"subs.{table}.{action}"``. In each field's text the characters a
    subject token cannot hold (``.``, ``*``, ``>``, spaces, control
    characters) become ``_``; the template's own text must not hold them
    but for the dots, nor an empty part (``subs..x``).
``timeout``
    Seconds to wait for JetStream's acknowledgements of one batch, and to
    connect (default 10).

The message is ``Event.to_json()`` with the headers ``Nats-Msg-Id`` (the
event's idempotency key: the database's id and the event id, the same on
every redelivery, so JetStream drops a redelivery inside its duplicate
window), ``Subs-Event-Id``, ``Subs-Table``, ``Subs-Action`` and
``Subs-Attempt``. An event is delivered only when JetStream acknowledges it
(PubAck); no acknowledgement in time, JetStream's refusal, no stream for
the subject, or a lost connection is a failed attempt with that reason. An
event too large for the server's ``max_payload`` (its JSON and headers
together) or the stream's ``max_msg_size`` is undeliverable: it goes dead
at once, saying which limit to raise (``subs retry`` sends it again). The
events of a claim are published together and their acknowledgements
awaited together (a batch handler), over one connection per listener
process that reconnects by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import math
import re
import string
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from subscriptions import hookimpl
from subscriptions.config import check_setting_names, positive_setting, tables_using, url_setting
from subscriptions.errors import SubsError, Undeliverable
from subscriptions.events import Event

# nats-py is imported where it is used, not here: every handler process
# loads the built-in plugins, and most never relay.
if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

log = logging.getLogger("subs.nats")
T = TypeVar("T")

DEFAULT_SUBJECT = "subs.{table}.{action}"
DEFAULT_TIMEOUT = 10.0
NO_RESPONDERS = "503"  # the status of the server's answer when no stream takes the subject
_NOT_IN_TOKEN = re.compile(r"[.*>\s\x00-\x1f\x7f]")
_LOGIN_KEYS = ("user", "password", "token", "creds")
SETTINGS = ("url", *_LOGIN_KEYS, "subject", "timeout")
_FIELDS = (
    "id",
    "table",
    "action",
    "tag",
    "pk",
    "old",
    "new",
    "attempt",
    "created_at",
    "subscription_id",
    "database_id",
)


class RelayError(Exception):
    """Why an event was not relayed (the attempt's error)."""


@dataclass(frozen=True)
class Settings:
    servers: tuple[str, ...]
    subject: str
    timeout: float
    login: tuple[tuple[str, str], ...]

    @property
    def shown(self) -> str:
        """The servers without any credentials in their URLs."""
        return ", ".join(re.sub(r"//[^/@]*@", "//", server) for server in self.servers)


def _settings(tag: str, table: Mapping[str, Any]) -> Settings:
    url = table.get("url")
    servers = [url] if isinstance(url, str) else list(url or [])
    servers = [str(server).strip() for server in servers if str(server).strip()]
    if not servers:
        raise SubsError(
            f'handler {tag!r} has no url: set [handlers.{tag}] url = "nats://host:4222" in subs.toml '
            f"or the environment variable SUBS__{tag.upper()}__URL"
        )
    for server in servers:
        url_setting(tag, server, ("nats", "tls"))
    login = {key: str(table[key]) for key in _LOGIN_KEYS if table.get(key)}
    if "password" in login and "user" not in login:
        raise SubsError(f"[handlers.{tag}] has a password but no user")
    if "token" in login and "user" in login:
        raise SubsError(f"[handlers.{tag}] sets both user and token; use one way to log in")
    subject = str(table.get("subject", DEFAULT_SUBJECT))
    try:
        sample = subject.format(**{name: "x" for name in _FIELDS})
    except (KeyError, IndexError, ValueError) as exc:
        raise SubsError(
            f"[handlers.{tag}] subject {subject!r} is not a valid template ({exc}); fields: {', '.join(_FIELDS)}"
        ) from None
    if any(not token or _NOT_IN_TOKEN.search(token) for token in sample.split(".")):
        raise SubsError(
            f"[handlers.{tag}] subject {subject!r} is not a subject to publish to: its parts between dots "
            "must be non-empty, without spaces, '*' or '>'"
        )
    timeout = positive_setting(tag, table, "timeout", DEFAULT_TIMEOUT)
    return Settings(tuple(servers), subject, timeout, tuple(sorted(login.items())))


def subject_for(event: Event, template: str) -> str:
    """The event's subject: ``template`` over its fields, each made a valid
    part of a subject (an empty one becomes ``_``)."""
    tokens = {name: _NOT_IN_TOKEN.sub("_", _text(getattr(event, name))) or "_" for name in _fields_in(template)}
    return template.format(**tokens)


@functools.cache
def _fields_in(template: str) -> frozenset[str]:
    return frozenset(name for _, name, _, _ in string.Formatter().parse(template) if name)


def _text(value: object) -> str:
    if isinstance(value, dict):
        return ",".join(str(item) for item in value.values())
    return "" if value is None else str(value)


def headers_for(event: Event) -> dict[str, str]:
    return {
        "Nats-Msg-Id": event.idempotency_key,
        "Subs-Event-Id": str(event.id),
        "Subs-Table": event.table,
        "Subs-Action": event.action,
        "Subs-Attempt": str(event.attempt),
    }


def header_block_size(headers: dict[str, str]) -> int:
    """Bytes of the header block nats-py sends ahead of the payload. The
    server holds the two together to ``max_payload`` (and closes the
    connection past it), while nats-py checks the payload alone."""
    return len(b"NATS/1.0\r\n\r\n") + sum(len(key) + len(value.encode()) + 4 for key, value in headers.items())


class _Loop:
    """One asyncio loop per process, on a thread of its own: the handler
    thread is not async, and the connection must outlive each batch."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="nats", daemon=True).start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)


async def _connect(settings: Settings, tag: str, *, reconnect: bool) -> Client:
    """A connection, or an error within ``timeout``. Only our own callbacks
    report its troubles (nats-py's defaults print tracebacks), and an outage
    is logged once, not at every reconnection attempt. Without ``reconnect``
    (a start-up check) the caller reports what went wrong."""
    quiet = threading.Event()
    if not reconnect:
        quiet.set()

    async def on_error(exc: Exception) -> None:
        if not quiet.is_set():
            quiet.set()
            log.warning("%s: NATS at %s: %s", tag, settings.shown, exc)

    async def on_disconnected() -> None:
        if reconnect:
            log.warning("%s: disconnected from NATS at %s; reconnecting", tag, settings.shown)

    async def on_reconnected() -> None:
        quiet.clear()
        log.info("%s: reconnected to NATS at %s", tag, settings.shown)

    from nats.aio.client import Client

    login: dict[str, Any] = dict(settings.login)
    if "creds" in login:
        login["user_credentials"] = login.pop("creds")
    client = Client()
    connecting = client.connect(
        list(settings.servers),
        name="subs",
        connect_timeout=math.ceil(settings.timeout),
        allow_reconnect=reconnect,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        error_cb=on_error,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
        **login,
    )
    try:
        await asyncio.wait_for(connecting, settings.timeout)
    except BaseException:
        await client.close()
        raise
    if reconnect:
        quiet.clear()
    return client


# JetStream's error code for a message over the stream's max_msg_size.
MESSAGE_TOO_LARGE = 10054


def _failure(outcome: BaseException, subject: str) -> BaseException:
    """The attempt's error for JetStream's refusal or a publish's error:
    undeliverable when the event is too large to ever be taken."""
    import nats.js.errors

    if isinstance(outcome, Undeliverable):
        return Undeliverable(f"nats {subject}: {outcome}")
    if isinstance(outcome, nats.js.errors.APIError) and outcome.err_code == MESSAGE_TOO_LARGE:
        return Undeliverable(
            f"nats {subject}: JetStream refused the message: {outcome.description}; raise the stream's "
            "max_msg_size, then `subs retry` the event"
        )
    return RelayError(f"nats {subject}: {_reason(outcome, subject)}")


def _reason(exc: BaseException, subject: str) -> str:
    import nats.errors
    import nats.js.errors

    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return f"no JetStream stream takes subject {subject}"
    if isinstance(exc, nats.js.errors.APIError):
        return f"JetStream refused the message: {exc.description or exc}"
    if isinstance(exc, (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError)):
        return "the connection to NATS was lost"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Acks:
    """JetStream's answers to one batch's messages, by their index."""

    expected: int
    answers: dict[int, BaseException | None] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def answer(self, index: int, outcome: BaseException | None) -> None:
        if index not in self.answers:
            self.answers[index] = outcome
            if len(self.answers) == self.expected:
                self.done.set()


def _outcome(msg: Msg) -> BaseException | None:
    """What an answer to a published message says: None for a PubAck."""
    data = msg.data
    if data.startswith(b'{"stream":') and data.endswith(b"}") and b'"error"' not in data and not msg.headers:
        return None  # a PubAck (the stream's name and sequence): most answers, not worth parsing
    import nats.js.errors

    if msg.headers and msg.headers.get("Status") == NO_RESPONDERS:
        return nats.js.errors.NoStreamResponseError()
    try:
        answer = json.loads(msg.data)
    except ValueError:
        return RelayError(f"JetStream's answer is not JSON: {msg.data[:100]!r}")
    if isinstance(answer, dict) and "error" in answer:
        try:
            nats.js.errors.APIError.from_error(answer["error"])  # raises the error it describes
        except Exception as refused:
            return refused
    return None


class Relay:
    """Publishes batches of events for one tag over one connection.

    Each message carries a reply subject of our own (inbox, batch number,
    index), answered by JetStream with a PubAck or an error; one
    subscription per connection takes the answers. nats-py's publish_async
    would do this, but never settles a message JetStream refuses (its
    error parser raises instead of returning the error; nats-io/nats.py#985,
    open in 2.16.0): the batch waited out its timeout and every refusal
    read "no acknowledgement"."""

    def __init__(self, tag: str, settings: Settings, loop: _Loop) -> None:
        self.tag = tag
        self.settings = settings
        self.loop = loop
        self.client: Client | None = None
        self.inbox = ""
        self.batch_numbers = itertools.count()
        self.waiting: dict[int, _Acks] = {}

    def publish(self, events: list[Event]) -> list[BaseException | None]:
        """Publish ``events`` and wait for their acknowledgements: one error
        (or None when acknowledged) per event."""
        # The coroutine bounds its own wait; this one only guards the thread.
        return self.loop.run(self._publish(events), timeout=3 * self.settings.timeout + 5)

    async def _connection(self) -> tuple[Client, str]:
        """Our connection and the inbox its answers come to."""
        if self.client is None or self.client.is_closed:
            try:
                client = await _connect(self.settings, self.tag, reconnect=True)
            except Exception as exc:
                raise RelayError(f"cannot connect to NATS at {self.settings.shown}: {exc}") from None
            inbox = client.new_inbox()
            await client.subscribe(f"{inbox}.>", cb=self._on_answer)
            self.client, self.inbox = client, inbox
        return self.client, self.inbox

    async def _on_answer(self, msg: Msg) -> None:
        number, _, index = msg.subject[len(self.inbox) + 1 :].partition(".")
        acks = self.waiting.get(int(number))
        if acks is not None:  # else the answer came after its batch gave up waiting
            acks.answer(int(index), _outcome(msg))

    async def _publish(self, events: list[Event]) -> list[BaseException | None]:
        try:
            client, inbox = await self._connection()
        except RelayError as exc:
            return [exc] * len(events)
        subjects = [subject_for(event, self.settings.subject) for event in events]
        number = next(self.batch_numbers)
        acks = self.waiting[number] = _Acks(len(events))
        try:
            for index, (event, subject) in enumerate(zip(events, subjects)):
                payload, headers = event.to_json().encode("utf-8"), headers_for(event)
                header_bytes = header_block_size(headers)
                if len(payload) + header_bytes > client.max_payload:
                    too_large = _over_max_payload(len(payload), header_bytes, client.max_payload)
                    acks.answer(index, Undeliverable(too_large))
                    continue
                try:
                    await client.publish(subject, payload, reply=f"{inbox}.{number}.{index}", headers=headers)
                except Exception as exc:
                    acks.answer(index, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(acks.done.wait(), self.settings.timeout)
        finally:
            del self.waiting[number]
        results: list[BaseException | None] = []
        for index, subject in enumerate(subjects):
            if index not in acks.answers:
                results.append(
                    RelayError(f"nats {subject}: no acknowledgement from JetStream within {self.settings.timeout:g} s")
                )
            elif (outcome := acks.answers[index]) is not None:
                results.append(_failure(outcome, subject))
            else:
                results.append(None)
        return results


def _over_max_payload(payload: int, headers: int, limit: int) -> str:
    return (
        f"the event is {payload:,} bytes of JSON and {headers:,} of headers, "
        f"more than the NATS server's max_payload of {limit:,}: "
        "raise max_payload, then `subs retry` the event"
    )


def check_login(tag: str, settings: Settings) -> None:
    """Refuse credentials the server refuses; an unreachable server is only a
    warning (its events fail and are retried until it is back)."""

    import nats.errors

    async def attempt() -> None:
        client = await _connect(settings, tag, reconnect=False)
        await client.close()

    try:
        asyncio.run(attempt())
    except (nats.errors.Error, OSError) as exc:  # TimeoutError is an OSError
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, nats.errors.Error) and re.search("authori[sz]ation|authentication", reason, re.I):
            raise SubsError(
                f"NATS at {settings.shown} refused the login of [handlers.{tag}]: {reason}; check user/password, "
                "token or creds"
            ) from None
        log.warning("%s: NATS at %s is not reachable now (%s); its events will be retried", tag, settings.shown, reason)


def _check_creds(tag: str, table: Mapping[str, Any]) -> None:
    """A credentials file that is missing or is not one is a start-up error:
    nats-py would fail every connection with an error that does not say so."""
    path = table.get("creds")
    if not path:
        return
    try:
        text = Path(str(path)).read_text("utf-8", errors="replace")
    except OSError as exc:
        raise SubsError(f"[handlers.{tag}] creds {path}: {exc.strerror or exc}") from None
    if not all(f"-----BEGIN {block}-----" in text for block in ("NATS USER JWT", "USER NKEY SEED")):
        raise SubsError(
            f"[handlers.{tag}] creds {path} is not a NATS credentials file: one holds a user's JWT and "
            "nkey seed, as `nsc generate creds` writes it"
        )
    import nkeys

    seed = text.split("-----BEGIN USER NKEY SEED-----", 1)[1].split("-----END", 1)[0].strip("- \n")
    try:
        nkeys.from_seed(seed.encode())
    except (nkeys.NkeysError, ValueError) as exc:
        raise SubsError(f"[handlers.{tag}] creds {path}: its nkey seed is not valid ({exc})") from None


_relays: dict[tuple[str, Settings], Relay] = {}
_loop: list[_Loop] = []


def relay_for(tag: str, table: Mapping[str, Any]) -> Relay:
    """This process's relay (and connection) for ``tag`` and its settings,
    made on first use."""
    settings = _settings(tag, table)
    if (tag, settings) not in _relays:
        if not _loop:
            _loop.append(_Loop())
        _relays[(tag, settings)] = Relay(tag, settings, _loop[0])
    return _relays[(tag, settings)]


def relay(events: list[Event], config: Mapping[str, Mapping[str, Any]]) -> Sequence[BaseException | None]:
    """The batch handler: a claim's events of one tag."""
    return relay_for(events[0].tag, config.get(events[0].tag, {})).publish(events)


@hookimpl
def register_handlers(register: Callable[..., None], config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, table in tables_using("nats", config).items():
        check_setting_names(tag, table, "nats", SETTINGS)
        _settings(tag, table)  # a missing url is a start-up error, not a retried failure
        _check_creds(tag, table)
    register("nats", lambda events: relay(events, config), batch=True)


@hookimpl
def listener_startup(config: Mapping[str, Mapping[str, Any]]) -> None:
    for tag, table in tables_using("nats", config).items():
        check_login(tag, _settings(tag, table))
