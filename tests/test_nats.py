"""The nats relay against a real nats-server with JetStream: what it
publishes, its failures, and whole listeners relaying through kills of the
listener and of the server."""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import StreamConfig

from subscriptions.builtin.nats_relay import header_block_size, headers_for
from subscriptions.db.connection import Database
from subscriptions.errors import SubsError, Undeliverable
from subscriptions.events import Event
from subscriptions.testing import deliver, load_handlers, make_event

from conftest import EngineWedged, Subs, assert_one_line_error, execute, wait_until
from listening import Listener, remaining
from natsserver import NatsServer, operator_setup

STREAM = "SUBS"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    nats_server = NatsServer(tmp_path)
    yield nats_server
    nats_server.kill()


@pytest.fixture
def stream(server: NatsServer) -> NatsServer:
    server.jetstream("add_stream", StreamConfig(name=STREAM, subjects=["subs.>"]))
    return server


def relay(url: str, **settings: Any):
    return load_handlers(config={"nats": {"url": url, "timeout": 2, **settings}})["nats"]


def test_relay_publishes_the_event_with_its_headers(stream: NatsServer) -> None:
    event = make_event("nats", table="ORDERS", action="U", id=42, attempt=2, new={"ID": 42, "NOTE": "ü<b>"})
    event.database_id = "db-1"
    deliver(relay(stream.url), event)
    (message,) = stream.messages(STREAM)
    assert message.subject == "subs.ORDERS.U"
    assert json.loads(message.data) == json.loads(event.to_json())
    assert message.headers == {
        "Nats-Msg-Id": "db-1:42",
        "Subs-Event-Id": "42",
        "Subs-Table": "ORDERS",
        "Subs-Action": "U",
        "Subs-Attempt": "2",
    }


def test_a_redelivery_is_dropped_by_jetstream(stream: NatsServer) -> None:
    handler = relay(stream.url)
    for attempt in (1, 2, 3):
        deliver(handler, make_event("nats", id=7, attempt=attempt))
    assert len(stream.messages(STREAM)) == 1


def test_subject_template_fields_become_safe_tokens(stream: NatsServer) -> None:
    handler = relay(stream.url, subject="subs.{tag}.{table}.{pk}")
    deliver(handler, make_event("nats", table="ORDER ITEMS.*>", pk={"ID": 5, "LINE": "a.b"}))
    (message,) = stream.messages(STREAM)
    assert message.subject == "subs.nats.ORDER_ITEMS___.5,a_b"


def test_without_a_stream_attempts_fail_until_one_is_made(server: NatsServer) -> None:
    handler = relay(server.url)
    with pytest.raises(Exception, match="no JetStream stream takes subject subs.T.I"):
        deliver(handler, make_event("nats"))
    server.jetstream("add_stream", StreamConfig(name=STREAM, subjects=["subs.>"]))
    deliver(handler, make_event("nats"))
    assert len(server.messages(STREAM)) == 1


def test_a_batch_is_published_together_and_judged_per_event(stream: NatsServer) -> None:
    handler = relay(stream.url, subject="{table}.{action}")
    stream.jetstream("add_stream", StreamConfig(name="OTHER", subjects=["KEPT.*"]))
    events = [make_event("nats", id=n, table="KEPT" if n % 2 else "LOST") for n in range(1, 201)]
    errors = handler.function(events)
    assert [error is None for error in errors] == [n % 2 == 1 for n in range(1, 201)]
    assert "no JetStream stream takes subject LOST.I" in str(errors[1])
    assert [int(m.headers["Subs-Event-Id"]) for m in stream.messages("OTHER")] == list(range(1, 201, 2))


def test_a_message_too_large_for_the_stream_is_undeliverable(server: NatsServer) -> None:
    """Settled by JetStream's answer, with its reason (nats-py's
    publish_async never settles it: nats-io/nats.py#985): no later attempt
    would be taken, so the event goes dead at once."""
    server.jetstream("add_stream", StreamConfig(name=STREAM, subjects=["subs.>"], max_msg_size=300))
    small, large = make_event("nats", id=1), make_event("nats", id=2, new={"NOTE": "x" * 1000})
    errors = relay(server.url).function([small, large])
    assert errors[0] is None and isinstance(errors[1], Undeliverable)
    assert str(errors[1]) == (
        "nats subs.T.I: JetStream refused the message: message size exceeds maximum allowed; "
        "raise the stream's max_msg_size, then `subs retry` the event"
    )
    assert [m.headers["Subs-Event-Id"] for m in server.messages(STREAM)] == ["1"]


def test_answers_of_a_stream_named_error_are_read_as_what_they_say(server: NatsServer) -> None:
    """A PubAck is recognised without parsing it unless it holds "error",
    as it does when the stream has that name: then it is parsed, and still
    acknowledges."""
    server.jetstream("add_stream", StreamConfig(name="error", subjects=["subs.>"], max_msg_size=300))
    small, large = make_event("nats", id=1), make_event("nats", id=2, new={"NOTE": "x" * 1000})
    errors = relay(server.url).function([small, large])
    assert errors[0] is None and isinstance(errors[1], Undeliverable)
    assert [m.headers["Subs-Event-Id"] for m in server.messages("error")] == ["1"]


def test_a_message_over_the_servers_max_payload_is_undeliverable(tmp_path: Path) -> None:
    """nats-py refuses to send it (the server would close the connection)."""
    server = NatsServer(tmp_path, max_payload=4096)
    try:
        server.jetstream("add_stream", StreamConfig(name=STREAM, subjects=["subs.>"]))
        large = make_event("nats", id=2, new={"NOTE": "é" * 5000})
        errors = relay(server.url).function([make_event("nats", id=1), large, make_event("nats", id=3)])
        assert errors[0] is None and errors[2] is None and isinstance(errors[1], Undeliverable)
        size = len(large.to_json().encode())
        assert str(errors[1]) == (
            f"nats subs.T.I: the event is {size:,} bytes of JSON and 94 of headers, more than the NATS server's "
            "max_payload of 4,096: raise max_payload, then `subs retry` the event"
        )
        assert [m.headers["Subs-Event-Id"] for m in server.messages(STREAM)] == ["1", "3"]
    finally:
        server.kill()


def test_the_headers_count_towards_max_payload(tmp_path: Path) -> None:
    """The server closes the connection of a message whose headers and
    payload together pass max_payload, failing every message of the batch
    with it: an event that fits only without its headers is undeliverable,
    and one that fits to the byte with them is delivered."""
    server = NatsServer(tmp_path, max_payload=4096)
    try:
        server.jetstream("add_stream", StreamConfig(name=STREAM, subjects=["subs.>"]))

        def sized(event_id: int, total: int) -> Event:
            short = make_event("nats", id=event_id, new={"NOTE": ""})
            message = len(short.to_json().encode()) + header_block_size(headers_for(short))
            return make_event("nats", id=event_id, new={"NOTE": "x" * (total - message)})

        handler = relay(server.url)
        errors = handler.function([make_event("nats", id=1), sized(2, 4097), make_event("nats", id=3)])
        assert errors[0] is None and errors[2] is None
        assert isinstance(errors[1], Undeliverable) and "max_payload of 4,096" in str(errors[1])
        assert handler.function([sized(4, 4096), make_event("nats", id=5)]) == [None, None]
        assert [m.headers["Subs-Event-Id"] for m in server.messages(STREAM)] == ["1", "3", "4", "5"]
    finally:
        server.kill()


def test_unanswered_messages_fail_and_late_answers_do_not_confuse_the_next_batch(stream: NatsServer) -> None:
    """A server that stops answering (SIGSTOP) fails the batch after
    ``timeout``. The next batch is sent while it is still stopped; once it
    goes on, it answers the first batch's messages, then the second's: the
    first batch's answers are dropped, and the second is judged by its own
    (its first message is refused, after a success for the first batch's
    first message came in)."""
    handler = relay(stream.url, subject="{table}.{action}", timeout=1)
    stream.jetstream("add_stream", StreamConfig(name="OTHER", subjects=["T.*"], max_msg_size=300))
    assert handler.function([make_event("nats", id=1)]) == [None]  # connected, answers subscribed
    stream.pause()
    try:
        errors = handler.function([make_event("nats", id=2), make_event("nats", id=3)])
        assert [str(error) for error in errors] == ["nats T.I: no acknowledgement from JetStream within 1 s"] * 2
        with ThreadPoolExecutor(1) as pool:
            too_large = make_event("nats", id=4, new={"NOTE": "x" * 1000})
            second = pool.submit(handler.function, [too_large, make_event("nats", id=5)])
            time.sleep(0.3)
            stream.resume()
            errors = second.result()
    finally:
        stream.resume()
    assert "JetStream refused the message: message size exceeds maximum allowed" in str(errors[0])
    assert errors[1] is None
    assert sorted(int(m.headers["Subs-Event-Id"]) for m in stream.messages("OTHER")) == [1, 2, 3, 5]


def test_an_unreachable_server_is_a_failed_attempt(server: NatsServer) -> None:
    server.kill()
    with pytest.raises(Exception, match=f"cannot connect to NATS at {server.url}"):
        deliver(relay(server.url), make_event("nats"))


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({}, "has no url"),
        ({"url": "http://x"}, "must start with nats://"),
        ({"url": "nats://x", "password": "p"}, "password but no user"),
        ({"url": "nats://x", "user": "u", "token": "t"}, "both user and token"),
        ({"url": "nats://x", "subject": "subs.{nope}"}, "not a valid template"),
        ({"url": "nats://x", "subject": "subs.{table} {action}"}, "is not a subject to publish to: its parts"),
        ({"url": "nats://x", "subject": "subs.*"}, "is not a subject to publish to"),
        ({"url": "nats://x", "subject": "subs.>"}, "is not a subject to publish to"),
        ({"url": "nats://x", "subject": "subs..{table}"}, "is not a subject to publish to"),
        ({"url": "nats://x", "subject": ".{table}"}, "is not a subject to publish to"),
        ({"url": "nats://x", "subject": ""}, "is not a subject to publish to"),
        ({"url": "nats://x", "timeout": "0"}, "timeout must be a positive number"),
        ({"url": "nats://x", "timeout": "inf"}, "timeout must be a positive number up to 86400"),
        ({"url": "nats://x", "creds": "/no/such.creds"}, "creds /no/such.creds: No such file or directory"),
        ({"url": "nats://x", "creds": "/etc/passwd"}, "creds /etc/passwd is not a NATS credentials file"),
    ],
)
def test_settings_are_checked_when_loading(settings: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SubsError, match=fragment):
        load_handlers(config={"nats": settings})


# --- whole listeners ------------------------------------------------------------


def nats_env(server: NatsServer, **settings: str) -> dict[str, str]:
    env = {"SUBS__NATS__URL": server.url, "SUBS__NATS__TIMEOUT": "2"}
    env.update({f"SUBS__NATS__{key.upper()}": value for key, value in settings.items()})
    return env


def test_bad_credentials_refuse_to_start_in_one_line(tmp_path: Path, subs: Subs) -> None:
    server = NatsServer(tmp_path, user="relay", password="right-one")
    try:
        result = subs("listen", "--drain", "--tag", "nats", env=nats_env(server, user="relay", password="wrong-one"))
        message = assert_one_line_error(result, "refused the login of [handlers.nats]")
        assert "wrong-one" not in message and "right-one" not in message
        good = subs("listen", "--drain", "--tag", "nats", env=nats_env(server, user="relay", password="right-one"))
        assert good.exit_code == 0, good.output + good.stderr
    finally:
        server.kill()


def test_token_login(tmp_path: Path) -> None:
    server = NatsServer(tmp_path, token="s3cret-token")
    try:
        server.jetstream("add_stream", StreamConfig(name=STREAM, subjects=["subs.>"]))
        deliver(relay(server.url, token="s3cret-token"), make_event("nats"))
        assert len(server.messages(STREAM)) == 1
        with pytest.raises(Exception, match="cannot connect to NATS") as refused:
            deliver(relay(server.url, token="wrong"), make_event("nats"))
        assert "wrong" not in str(refused.value)
    finally:
        server.kill()


def test_a_creds_file_with_a_damaged_seed_is_a_start_up_error(tmp_path: Path) -> None:
    _, creds = operator_setup(tmp_path)
    lines = creds.read_text().splitlines()
    seed = next(index for index, line in enumerate(lines) if line.startswith("SU"))
    lines[seed] = lines[seed][:20]  # cut short, as by a bad copy
    creds.write_text("\n".join(lines) + "\n")
    with pytest.raises(SubsError, match=f"creds {creds}: its nkey seed is not valid"):
        load_handlers(config={"nats": {"url": "nats://x", "creds": str(creds)}})


def test_creds_login(tmp_path: Path, subs: Subs) -> None:
    """A user of an operator the server trusts (decentralized JWT login, as
    nsc and NGS set it up) relays; one of an operator it does not know is
    refused, by `subs listen` in one line."""
    server = NatsServer(tmp_path, creds=True)
    (tmp_path / "other").mkdir()
    _, stranger = operator_setup(tmp_path / "other")
    try:
        server.jetstream("add_stream", StreamConfig(name=STREAM, subjects=["subs.>"]))
        deliver(relay(server.url, creds=str(server.creds)), make_event("nats"))
        assert len(server.messages(STREAM)) == 1
        good = subs("listen", "--drain", "--tag", "nats", env=nats_env(server, creds=str(server.creds)))
        assert good.exit_code == 0, good.output + good.stderr
        refused = subs("listen", "--drain", "--tag", "nats", env=nats_env(server, creds=str(stranger)))
        assert_one_line_error(refused, "refused the login of [handlers.nats]")
    finally:
        server.kill()


@pytest.fixture
def orders(settings, subs: Subs, stream: NatsServer, monkeypatch):
    """ORDERS subscribed (IU) by the nats relay, whose settings listeners
    started now get from the environment."""
    execute(settings, "CREATE TABLE ORDERS (ID INTEGER NOT NULL PRIMARY KEY, STATUS VARCHAR(20))")
    subs.ok("add", "orders", "IU", "nats")
    for name, value in nats_env(stream).items():
        monkeypatch.setenv(name, value)
    return settings


def produce(settings, count: int, pause: float, stop: EventType, committed: Synchronized) -> None:
    """Insert orders and update some of them, in small transactions, until
    ``count`` rows or until stopped, adding each commit's changes (one event
    each) to ``committed``."""
    with Database(settings) as db:
        for first in range(1, count + 1, 10):
            if stop.is_set():
                return
            with db.transaction() as cursor:
                for key in range(first, first + 10):
                    cursor.execute("INSERT INTO ORDERS VALUES (?, 'new')", (key,))
                cursor.execute("UPDATE ORDERS SET STATUS = 'paid' WHERE ID = ?", (first,))
            with committed.get_lock():
                committed.value += 11
            time.sleep(pause)


class Producer:
    """``produce`` in a process of its own, killed on leaving the ``with``
    block if still running. Not a thread of the test's process: after a
    listener's SIGKILL the embedded engine can wedge every process attached
    to the database (tests/SOAK-NOTES.md, finding 8), and a wedged attachment
    of the test's own process would hang every later test of it."""

    def __init__(self, settings, count: int, pause: float = 0.0) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.stop = spawn.Event()
        self.committed = spawn.Value("i", 0)
        self.process = spawn.Process(target=produce, args=(settings, count, pause, self.stop, self.committed))

    def __enter__(self) -> Producer:
        self.process.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.is_alive():
            self.process.kill()
            self.process.join()

    def finish(self, timeout: float, stop: bool = True) -> int:
        """Stop it (or let it finish its rows) and return the changes it committed."""
        if stop:
            self.stop.set()
        self.process.join(timeout)
        assert self.process.exitcode == 0, f"the producer did not end well within {timeout:g}s: {self.process}"
        return int(self.committed.value)


def stored(server: NatsServer) -> int:
    return int(server.jetstream("stream_info", STREAM).state.messages)


def assert_each_event_once(server: NatsServer, changes: int) -> None:
    messages = server.messages(STREAM)
    ids = Counter(m.headers["Nats-Msg-Id"] for m in messages)
    assert [key for key, seen in ids.items() if seen > 1] == []
    assert len(messages) == changes
    keys = Counter((json.loads(m.data)["pk"]["ID"], m.headers["Subs-Action"]) for m in messages)
    assert all(seen == 1 for seen in keys.values())


def wait_for_messages(
    stream: NatsServer,
    count: int,
    producer: Producer,
    listener: Listener,
    engine: str,
    what: str,
    timeout: float = 30.0,
    started: bool = False,
) -> None:
    """Wait until the stream holds more than ``count`` messages. On the
    embedded engine, a wait in which the producer committed nothing, or a
    listener just ``started`` relayed nothing at all (its processes attach
    after its "listening on" line: the claimer's attachment may be the one
    that waits), met the engine's wedge after the listener's SIGKILL
    (EngineWedged; its stacks say where it waited). Any other timeout says
    what the producer, the stream and the listener did meanwhile (on the
    Firebird 3 server it ran silent for 60 s twice in CI, its claims passing
    over a locked lease row: tests/SOAK-NOTES.md, finding 6, "Later")."""
    committed = producer.committed.value
    relayed = stored(stream)
    try:
        wait_until(lambda: stored(stream) > count, timeout, what)
    except AssertionError as timed_out:
        produced, relaying = producer.committed.value - committed, stored(stream) - relayed
        done = f"the producer committed {produced} change(s), the listener relayed {relaying}"
        seen = f"the listener's log:\n{listener.output()[-3000:]}\nits stacks:\n{listener.stacks()}"
        if engine == "fb3" or (produced and (relaying or not started)):
            raise AssertionError(f"{timed_out}: {done} (waited for {count - relayed + 1}); {seen}") from None
        raise EngineWedged(
            f"the embedded engine wedged after a SIGKILL: no {what} in {timeout:g} s, {done} "
            f"(tests/SOAK-NOTES.md, finding 8); {seen}"
        ) from None


def test_the_stream_gets_every_event_once_through_listener_and_server_kills(
    orders, engine: str, tmp_path: Path, stream: NatsServer, listeners
) -> None:
    settings = orders
    with Producer(settings, 100_000, pause=0.02) as producer:
        first = Listener(settings, tmp_path, "--tag", "nats", "--mode", "parallel", "--workers", "2", "--lease", "3")
        listeners.append(first)
        wait_until(lambda: stored(stream) > 100, what="the first messages")
        first.stop()
        relayed = stored(stream)
        second = Listener(settings, tmp_path, "--tag", "nats", "--mode", "parallel", "--workers", "2", "--lease", "3")
        listeners.append(second)
        # stop() reaps the killed processes at once: the embedded engine waits
        # on a zombie's locks (docs/FIREBIRD-BUGS.md, 10). New workers may
        # still wait 10 s to register for events (SOAK-NOTES finding 3).
        wait_for_messages(
            stream, relayed + 100, producer, second, engine, "messages from the second listener", 60, started=True
        )
        stream.kill()
        time.sleep(1.5)  # the listener's publishes fail meanwhile
        stream.start()
        relayed = stored(stream)
        wait_for_messages(stream, relayed + 100, producer, second, engine, "messages after the server's restart")
        changes = producer.finish(60)
    wait_until(lambda: remaining(settings) == 0, timeout=90, what="an empty EVENT_LOG")
    assert_each_event_once(stream, changes)
    assert "disconnected from NATS" in second.output()
    assert "Traceback" not in second.output()


def test_two_listeners_relay_to_one_stream_each_event_once(
    orders, tmp_path: Path, stream: NatsServer, listeners
) -> None:
    settings = orders
    for host in ("a", "b"):
        directory = tmp_path / host
        directory.mkdir()
        listeners.append(Listener(settings, directory, "--tag", "nats", "--mode", "parallel", "--workers", "2"))
    with Producer(settings, 500) as producer:
        changes = producer.finish(60, stop=False)
    wait_until(lambda: remaining(settings) == 0, timeout=90, what="an empty EVENT_LOG")
    assert_each_event_once(stream, changes)
    senders = {int(m.headers["Subs-Event-Id"]) for m in stream.messages(STREAM)}
    assert len(senders) == changes
