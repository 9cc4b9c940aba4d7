"""`subs web` over HTTP: a real server process on a free port, on embedded
Firebird and the Firebird 3 server. Its security (token, cookie, CSRF,
read-only, headers, request log), the JSON API (lists, keyset pages, the key
filter, one event, actions, statistics) and its bad input."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from reverseproxy import serving as reverse_proxy

from subscriptions.db import sql
from subscriptions.db.connection import Database, read_only_tpb
from subscriptions.delivery import stats
from subscriptions.ops import console

from conftest import Subs, assert_one_line_error, execute, query, state, uncommitted
from listening import Listener, insert
from processes import hangup
from webconsole import Console, request


@pytest.fixture
def web(items, tmp_path: Path) -> Iterator[Console]:
    console = Console(items, tmp_path)
    yield console
    console.stop()


def drain(settings, tmp_path: Path, *args: str) -> None:
    listener = Listener(settings, tmp_path, "--drain", "--workers", "1", *args)
    listener.finish()


def dead_and_failed(items, tmp_path: Path) -> tuple[int, int]:
    """Rows 1-3 handled, row 4's insert dead, row 5's insert failed (its next
    attempt in 5 minutes), all through a real listener; returns (dead, failed)."""
    insert(items, 1, 3)
    insert(items, 4, 1, "fail")
    drain(items, tmp_path, "--max-attempts", "1")
    insert(items, 5, 1, "fail")
    drain(items, tmp_path, "--max-attempts", "3", "--backoff-min", "300", "--backoff-max", "300")
    (dead,), (failed,) = query(items, "SELECT EVENT_ID FROM EVENT_LOG ORDER BY EVENT_ID")
    return dead, failed


# -- who may use it ---------------------------------------------------------------------


def test_every_request_needs_the_token(web: Console) -> None:
    for path in ("/", "/events", "/events/1", "/api/subscriptions", "/static/console.css", "/figures"):
        status, headers, _ = web.request("GET", path, bearer=False)
        assert status == 401, path
        assert "default-src 'self'" in headers["content-security-policy"]
    status, _, body = web.request("GET", "/api/subscriptions", bearer=False, headers={"Authorization": "Bearer wrong"})
    assert status == 401 and "token" in json.loads(body)["error"]
    assert web.request("GET", "/?token=wrong", bearer=False)[0] == 401
    assert web.request("POST", "/api/subscriptions/1/pause", bearer=False)[0] == 401


def test_the_token_in_the_address_becomes_a_strict_cookie_and_leaves_the_address(web: Console) -> None:
    status, headers, _ = web.request("GET", f"/events?state=dead&token={web.token}", bearer=False)
    assert status == 303
    assert headers["location"] == "/events?state=dead"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and web.token not in cookie
    session = cookie.split(";")[0]
    status, headers, body = web.request("GET", "/events?state=dead", bearer=False, headers={"Cookie": session})
    assert status == 200 and b"<h1>Events</h1>" in body
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in headers["content-security-policy"]


def _session(web: Console) -> str:
    _, headers, _ = web.request("GET", f"/?token={web.token}", bearer=False)
    return headers["set-cookie"].split(";")[0]


def _csrf(web: Console, session: str) -> str:
    _, _, body = web.request("GET", "/", bearer=False, headers={"Cookie": session})
    return body.decode().split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_a_cross_site_or_tokenless_form_post_is_refused_and_changes_nothing(items, web: Console) -> None:
    session = _session(web)
    form = {"Cookie": session, "Content-Type": "application/x-www-form-urlencoded"}
    before = state(items)
    # The browser sent the cookie, but the form came from another site.
    evil = {**form, "Origin": "http://evil.example"}
    status, _, _ = web.request("POST", "/api/subscriptions/1/pause", bearer=False, headers=evil, body=b"next=/")
    assert status == 403
    status, _, _ = web.request(
        "POST", "/api/subscriptions/1/pause", bearer=False, headers={**form, "Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403
    # A same-site page without the console's CSRF token (say another app on localhost).
    status, _, body = web.request("POST", "/api/subscriptions/1/pause", bearer=False, headers=form, body=b"next=/")
    assert status == 403 and b"CSRF" in body
    assert state(items) == before
    body = urlencode({"csrf": _csrf(web, session), "next": "/"}).encode()
    status, headers, _ = web.request("POST", "/api/subscriptions/1/pause", bearer=False, headers=form, body=body)
    assert status == 303 and headers["location"] == "/"
    notice = headers["set-cookie"].split(";")[0]
    _, _, page = web.request("GET", "/", bearer=False, headers={"Cookie": f"{session}; {notice}"})
    assert "subscription 1 (ITEMS I rec) is paused" in page.decode()
    assert query(items, "SELECT PAUSED FROM EVENT_SUBSCRIBER WHERE SUB_ID = 1") == [(True,)]


def test_a_browser_says_whether_a_post_is_its_own_whatever_a_proxy_did_to_host(items, web: Console) -> None:
    """Behind a reverse proxy that sends the console's own address as Host
    (nginx's default), the Origin of the console's own forms is the
    proxy's, and every action was refused as from another site."""
    session = _session(web)
    body = urlencode({"csrf": _csrf(web, session), "next": "/"}).encode()
    form = {"Cookie": session, "Content-Type": "application/x-www-form-urlencoded", "Origin": "https://ops.example"}
    for site, status in (("same-site", 403), ("cross-site", 403), ("same-origin", 303)):
        answer = web.request(
            "POST", "/api/subscriptions/1/pause", bearer=False, headers={**form, "Sec-Fetch-Site": site}, body=body
        )
        assert answer[0] == status, (site, answer)
    # A browser too old to send Sec-Fetch-Site is judged by its Origin.
    assert web.request("POST", "/api/subscriptions/1/resume", bearer=False, headers=form, body=body)[0] == 403
    assert query(items, "SELECT PAUSED FROM EVENT_SUBSCRIBER WHERE SUB_ID = 1") == [(True,)]


def test_cookies_are_secure_when_a_tls_proxy_says_the_browser_came_over_https(web: Console) -> None:
    """A TLS proxy on this host that sends X-Forwarded-Proto (which uvicorn
    believes from this host): the session and notice cookies are Secure, so
    the browser never sends them over plain http. Without it, over plain
    http, they cannot be."""
    over_tls = {"X-Forwarded-Proto": "https"}
    _, headers, _ = web.request("GET", f"/?token={web.token}", bearer=False, headers=over_tls)
    assert "; Secure" in headers["set-cookie"], headers["set-cookie"]
    session = headers["set-cookie"].split(";")[0]
    body = urlencode({"csrf": _csrf(web, session), "next": "/"}).encode()
    form = {**over_tls, "Cookie": session, "Content-Type": "application/x-www-form-urlencoded"}
    _, headers, _ = web.request("POST", "/api/subscriptions/1/pause", bearer=False, headers=form, body=body)
    assert headers["set-cookie"].startswith("subs_notice=") and "; Secure" in headers["set-cookie"]
    _, headers, _ = web.request("GET", f"/?token={web.token}", bearer=False)
    assert "Secure" not in headers["set-cookie"]


def test_behind_a_reverse_proxy_under_a_prefix(items, tmp_path: Path) -> None:
    """Served as nginx's `location /ops/subs/ { proxy_pass
    http://127.0.0.1:8400/; }` serves it (a real proxy here, which strips the
    prefix and sends the console's address as Host) with `--root-path`:
    every link, redirect and cookie carries the prefix, and actions work."""
    token = "p" * 20
    console = Console(items, tmp_path, "--root-path", "/ops/subs/", token=token)
    try:
        with reverse_proxy(f"{console.host}:{console.port}", "/ops/subs") as base:
            proxy = urlsplit(base)

            def through(method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> tuple:
                return request(
                    proxy.hostname or "", proxy.port or 0, method, "/ops/subs" + path, headers=headers, body=body
                )

            status, headers, _ = through("GET", f"/events?state=dead&token={token}", {})
            assert (status, headers["location"]) == (303, "/ops/subs/events?state=dead")
            assert "Path=/ops/subs/;" in headers["set-cookie"]
            session = {"Cookie": headers["set-cookie"].split(";")[0], "Accept": "text/html"}
            status, _, page = through("GET", "/", session)
            addresses = re.findall(r'(?:href|src|action|hx-get)="([^"]*)"', page.decode())
            assert status == 200 and len(addresses) > 10
            assert all(address.startswith("/ops/subs/") for address in addresses), addresses
            assert through("GET", "/static/console.css", session)[0] == 200
            csrf = page.decode().split('name="csrf" value="', 1)[1].split('"', 1)[0]
            form = {
                **session,
                "Content-Type": "application/x-www-form-urlencoded",
                "Origin": f"http://{proxy.netloc}",
                "Sec-Fetch-Site": "same-origin",
            }
            body = urlencode({"csrf": csrf, "next": "/events?state=dead"}).encode()
            status, headers, _ = through("POST", "/api/subscriptions/1/pause", form, body)
            assert (status, headers["location"]) == (303, "/ops/subs/events?state=dead")
            assert "Path=/ops/subs/;" in headers["set-cookie"]
            assert query(items, "SELECT PAUSED FROM EVENT_SUBSCRIBER WHERE SUB_ID = 1") == [(True,)]
            status, _, answer = through("GET", "/api/nothing", {"Authorization": f"Bearer {token}"})
            assert status == 404 and "error" in json.loads(answer)
    finally:
        console.stop()


def test_only_get_and_post_are_served(web: Console) -> None:
    assert web.request("DELETE", "/api/events/1")[0] == 405
    assert web.request("PUT", "/api/subscriptions/1/pause")[0] == 405


def test_read_only_refuses_every_action(items, tmp_path: Path) -> None:
    console = Console(items, tmp_path, "--read-only")
    try:
        before = state(items)
        for path in ("/api/subscriptions/1/pause", "/api/subscriptions/1/retry-dead", "/api/events/1/discard"):
            status, body = console.post_json(path)
            assert status == 403 and "read-only" in body["error"]
        assert state(items) == before
        _, _, page = console.request("GET", "/")
        assert b"read-only" in page and b"<form" not in page
    finally:
        console.stop()


def test_the_request_log_never_shows_the_token(items, tmp_path: Path) -> None:
    token = "a-token-of-our-own-0123456789"
    console = Console(items, tmp_path, token=token)
    try:
        assert console.url.endswith("/") and token not in console.url
        console.request("GET", f"/events?state=dead&token={token}", bearer=False)
        console.request("GET", "/api/subscriptions")
    finally:
        console.stop()
    log = console.log_text()
    assert "GET /events?state=dead&token=%2A%2A%2A 303" in log and "GET /api/subscriptions 200" in log
    assert token not in log


@pytest.mark.parametrize(
    ("arguments", "environment", "fragments"),
    [
        (("--host", "0.0.0.0"), {}, ("--host 0.0.0.0", "--token", "127.0.0.1")),
        (("--token", "short"), {}, ("at least 16 characters",)),
        (("--port", "70000"), {}, ("--port",)),
        (("--root-path", "subs"), {}, ("--root-path", "'subs' is not a path prefix like /subs")),
        (("--root-path", "/a/../b"), {}, ("--root-path", "'/a/../b' is not a path prefix")),
        (("--root-path", "/a b"), {}, ("--root-path", "'/a b' is not a path prefix")),
    ],
)
def test_bad_web_options_are_one_line_errors(items, arguments, environment, fragments) -> None:
    result = Subs(items)("web", *arguments, env=environment)
    usage = "--port" in arguments or "--root-path" in arguments
    assert_one_line_error(result, *fragments, exit_code=2 if usage else 1)


def test_a_port_in_use_is_a_one_line_error(web: Console, items) -> None:
    result = Subs(items)("web", "--port", str(web.port))
    assert_one_line_error(result, f"cannot listen on 127.0.0.1:{web.port}", "--port")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_stops_the_console_as_a_normal_end(items, tmp_path: Path, stop: signal.Signals) -> None:
    """Before, uvicorn raised the signal again once it had shut down: Ctrl-C
    printed "Aborted!" and exited 1, SIGTERM ended the process with 143, and
    SIGHUP (its terminal closed) killed it on the spot."""
    with hangup(signal.SIG_DFL):  # as a terminal starts it, whatever started the tests (nohup)
        web = Console(items, tmp_path)
    try:
        assert web.get_json("/api/subscriptions")
        web.process.send_signal(stop)
        assert web.process.wait(30) == 0
        assert web.log_text().splitlines()[-1] == "subs console stopped"
        assert "Aborted" not in web.log_text()
    finally:
        web.stop()


def test_without_the_web_extra_subs_web_says_how_to_install_it(items) -> None:
    blocked = "import sys; sys.modules['starlette'] = None; from subscriptions.cli import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", blocked, "-d", items.dsn, "web"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.strip() == "Error: subs web needs the web extra: pip install 'firebird-subs[web]'"


# -- the API ------------------------------------------------------------------------------


def test_subscriptions_show_counts_state_and_capture(items, tmp_path: Path, web: Console) -> None:
    dead, failed = dead_and_failed(items, tmp_path)
    insert(items, 10, 2)
    Subs(items).ok("pause", "items", "D", "rec")
    rows = {row["action"]: row for row in web.get_json("/api/subscriptions")}
    inserts = rows["I"]
    assert {key: inserts[key] for key in ("id", "table", "tag", "paused", "pending", "failed", "dead")} == {
        "id": 1,
        "table": "ITEMS",
        "tag": "rec",
        "paused": False,
        "pending": 2,
        "failed": 1,
        "dead": 1,
    }
    assert inserts["capture"] == "ok" and inserts["in_flight"] == 0 and inserts["at_least"] == []
    assert rows["D"]["paused"] is True and rows["U"]["pending"] == 0


def test_subscriptions_show_the_listeners_that_take_their_tag(items, tmp_path: Path, web: Console, listeners) -> None:
    Subs(items).ok("add", "items", "I", "rec2")
    insert(items, 1, 1)
    listener = Listener(items, tmp_path, "--tag", "rec2", "--mode", "parallel")
    listeners.append(listener)
    listener.wait_for(lambda lines: len(lines) >= 2)  # rec2's event, started and done
    rows = {(row["action"], row["tag"]): row for row in web.get_json("/api/subscriptions")}
    assert rows[("I", "rec2")]["listening"] == "parallel"
    assert rows[("I", "rec")]["listening"] == "-" and rows[("I", "rec")]["pending"] == 1
    status, _, body = web.request("GET", "/figures")
    page = body.decode()
    assert status == 200, page
    assert '<td id="listening-4" class="">parallel</td>' in page
    assert '<td id="listening-1" class="problem">-</td>' in page  # its event waits with no listener
    assert '<td id="listening-2" class="">-</td>' in page  # nothing waits


def test_subscriptions_show_their_last_backfill(items, web: Console) -> None:
    insert(items, 1, 30)
    execute(items, "DELETE FROM EVENT_LOG")  # the inserts' own events
    Subs(items).ok("backfill", "items", "rec", "--batch", "10")
    (inserts,) = [row for row in web.get_json("/api/subscriptions") if row["action"] == "I"]
    assert {key: inserts["backfill"][key] for key in ("rows_done", "rows_total", "events", "finished", "running")} == {
        "rows_done": 30,
        "rows_total": 30,
        "events": 30,
        "finished": True,
        "running": False,
    }
    assert '<div class="backfill" id="backfill-1">backfill: done 30 rows</div>' in web.get_text("/figures")
    execute(items, "UPDATE EVENT_BACKFILL SET FINISHED_AT = NULL, ROWS_DONE = 10, ROWS_TOTAL = 30")
    assert "backfill: 10/30 rows (33%), stopped " in web.get_text("/figures")
    assert 'id="backfill-2"' not in web.get_text("/figures")  # an update subscription takes none


def test_events_are_listed_by_state_and_subscription_in_keyset_pages(items, web: Console) -> None:
    insert(items, 1, 120)
    execute(items, "UPDATE ITEMS SET NOTE = 'x' WHERE ID <= 30")
    seen: list[int] = []
    after = None
    while True:
        cursor = {"after": after} if after else {}
        query_string = urlencode({"subscription": 1, "state": "pending", "limit": 50, **cursor})
        page = web.get_json(f"/api/events?{query_string}")
        seen += [event["id"] for event in page["events"]]
        assert all(event["subscription"] == 1 and event["state"] == "pending" for event in page["events"])
        after = page["next"]
        if after is None:
            break
    assert seen == sorted(seen) and len(seen) == 120
    everything = web.get_json("/api/events?limit=500")
    assert len(everything["events"]) == 150 and everything["next"] is None
    first = web.get_json("/api/events?limit=1")["events"][0]
    assert set(first) >= {"id", "subscription", "state", "attempts", "last_error", "pk", "old", "new", "created_at"}
    assert first["pk"] == {"ID": 1} and first["new"] == {"ID": 1, "NOTE": ""} and first["old"] is None


def test_the_key_filter_finds_every_event_of_one_row(items, web: Console) -> None:
    insert(items, 1, 5)
    execute(items, "UPDATE ITEMS SET NOTE = 'a' WHERE ID = 3", "UPDATE ITEMS SET NOTE = 'b' WHERE ID IN (2, 3)")
    execute(items, "DELETE FROM ITEMS WHERE ID = 3")
    found = web.get_json("/api/events?table=items&key=3")["events"]
    assert [(event["subscription"], event["pk"]) for event in found] == [
        (1, {"ID": 3}),
        (2, {"ID": 3}),
        (2, {"ID": 3}),
        (3, {"ID": 3}),
    ]
    assert [event["new"] for event in found[1:3]] == [{"ID": 3, "NOTE": "a"}, {"ID": 3, "NOTE": "b"}]
    only_updates = web.get_json("/api/events?subscription=2&key=3&limit=1")
    assert len(only_updates["events"]) == 1 and only_updates["next"] is not None
    rest = web.get_json(f"/api/events?subscription=2&key=3&after={only_updates['next']}")
    assert [event["new"]["NOTE"] for event in rest["events"]] == ["b"] and rest["next"] is None
    assert web.get_json("/api/events?table=items&key=99")["events"] == []


def test_the_key_filter_on_a_composite_key_of_other_types(settings, web: Console) -> None:
    execute(
        settings,
        "CREATE TABLE LINES (ORDER_NO NUMERIC(18,2) NOT NULL, CODE VARCHAR(10) CHARACTER SET UTF8 NOT NULL, "
        "DAY_OF DATE NOT NULL, QTY INTEGER, PRIMARY KEY (ORDER_NO, CODE, DAY_OF))",
    )
    Subs(settings).ok("add", "lines", "IU", "rec")
    execute(
        settings,
        "INSERT INTO LINES VALUES (12.5, 'Müsli', DATE '2026-01-02', 1)",
        "INSERT INTO LINES VALUES (12.5, 'Müsli', DATE '2026-01-03', 1)",
        "UPDATE LINES SET QTY = 2 WHERE DAY_OF = DATE '2026-01-02'",
    )
    keys = urlencode([("table", "lines"), ("key", "12.50"), ("key", "Müsli"), ("key", "2026-01-02")])
    found = web.get_json(f"/api/events?{keys}")["events"]
    assert [event["pk"]["DAY_OF"] for event in found] == ["2026-01-02", "2026-01-02"]
    assert found[0]["pk"]["ORDER_NO"] == "12.50"  # a Decimal, as event.to_json() writes it


@pytest.mark.parametrize(
    ("query_string", "fragments"),
    [
        ("state=lost", ("state 'lost' is not one of pending, failed, dead",)),
        ("key=3", ("needs the subscription or the table",)),
        ("table=items&key=abc", ("abc is not a key of ITEMS (ID)", "conversion error")),
        ("table=items&key=1&key=2", ("the key of ITEMS is ID: give 1 value(s), not 2",)),
        ("table=nosuch&key=1", ("table 'nosuch' does not exist",)),
        ("subscription=x", ("subscription must be a whole number",)),
        ("limit=0", ("limit must be between 1 and 500",)),
        ("after=9223372036854775808", ("after must be a whole number up to 9223372036854775807",)),
    ],
)
def test_bad_filters_are_one_line_400s(web: Console, query_string: str, fragments: tuple[str, ...]) -> None:
    status, _, body = web.request("GET", f"/api/events?{query_string}")
    assert status == 400, body
    error = json.loads(body)["error"]
    assert "\n" not in error and all(fragment in error for fragment in fragments), error
    status, _, page = web.request("GET", f"/events?{query_string}")
    assert status == 200 and fragments[0].replace("'", "&#39;") in page.decode()


def test_unknown_events_and_subscriptions_are_404(web: Console) -> None:
    for method, path in [
        ("GET", "/api/events/999"),
        ("GET", "/events/999"),
        ("GET", "/api/events/9223372036854775808"),
        ("GET", "/events/9223372036854775808"),
        ("POST", "/api/events/9223372036854775808/retry"),
        ("GET", "/api/events?subscription=99"),
        ("POST", "/api/events/999/retry"),
        ("POST", "/api/subscriptions/99/pause"),
        ("POST", "/api/subscriptions/1/explode"),
    ]:
        assert web.request(method, path)[0] == 404, path


def test_a_browser_is_refused_with_a_page_an_api_client_with_json_others_with_a_line(web: Console) -> None:
    """A browser (Accept: text/html) gets the console's layout, the status,
    the reason and a way back; a bare line of text left it stranded."""
    browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    for path, bearer, status, heading, reason in [
        ("/events?subscription=99", True, 404, "Not found", "there is no subscription 99"),
        ("/events/999", True, 404, "Not found", "there is no event 999; it was handled or discarded"),
        ("/no/such/page", True, 404, "Not found", "there is no page /no/such/page"),
        ("/events/abc", True, 404, "Not found", "there is no page /events/abc"),
        ("/events", False, 401, "The console&#39;s token is needed", "the console needs its token: open the address"),
    ]:
        answer, headers, body = web.request("GET", path, headers=browser, bearer=bearer)
        assert (answer, headers["content-type"]) == (status, "text/html; charset=utf-8"), path
        assert "default-src 'self'" in headers["content-security-policy"]
        page = body.decode()
        assert f"<h1>{heading}</h1>" in page and f'<p id="refused">{reason}' in page, page
        assert '<a href="/">Back to the subscriptions</a>' in page
        answer, headers, body = web.request("GET", path, bearer=bearer)
        assert (answer, headers["content-type"]) == (status, "text/plain; charset=utf-8"), path
        assert body.decode().startswith(reason) and body.count(b"\n") == 1, body
    answer, _, body = web.request("GET", "/api/no/such", headers=browser)
    assert (answer, json.loads(body)) == (404, {"error": "there is no page /api/no/such"})


def test_one_event_with_its_values_as_to_json_encodes_them(settings, web: Console) -> None:
    execute(
        settings,
        "CREATE TABLE KINDS (ID INTEGER NOT NULL PRIMARY KEY, AMOUNT NUMERIC(18,4), RAW VARCHAR(4) CHARACTER SET "
        "OCTETS, AT_TIME TIMESTAMP, TEXT_VALUE VARCHAR(40))",
    )
    Subs(settings).ok("add", "kinds", "U", "rec")
    execute(settings, "INSERT INTO KINDS VALUES (1, 1.5, x'00ff10', TIMESTAMP '2026-11-24 10:00:00', 'a')")
    execute(settings, "UPDATE KINDS SET AMOUNT = 2.25, TEXT_VALUE = '<b>b</b>'")
    (event_id,) = query(settings, "SELECT EVENT_ID FROM EVENT_LOG")[0]
    event = web.get_json(f"/api/events/{event_id}")
    assert event["old"]["AMOUNT"] == "1.5000" and event["new"]["AMOUNT"] == "2.2500"
    assert event["new"]["RAW"] == "AP8Q" and event["new"]["AT_TIME"] == "2026-11-24T10:00:00"
    assert event["state"] == "pending" and event["attempts"] == 0 and event["last_error"] is None
    status, _, page = web.request("GET", f"/events/{event_id}")
    html = page.decode()
    assert status == 200 and "&lt;b&gt;b&lt;/b&gt;" in html and "<b>b</b>" not in html
    assert html.count('class="changed"') == 2  # AMOUNT and TEXT_VALUE


def large_values(settings) -> str:
    """DOCS subscribed for inserts and updates under one tag, a row of a
    100,000-character text BLOB inserted, then an 'x' appended to it."""
    execute(settings, "CREATE TABLE DOCS (ID INTEGER NOT NULL PRIMARY KEY, BODY BLOB SUB_TYPE TEXT)")
    Subs(settings).ok("add", "docs", "I", "mail")
    Subs(settings).ok("add", "docs", "U", "mail")
    body = "é" * 100_000
    execute(settings, "INSERT INTO DOCS VALUES (1, ?)", params=(body,))
    execute(settings, "UPDATE DOCS SET BODY = BODY || 'x'")
    return body


def test_events_with_large_values_are_listed(settings, web: Console) -> None:
    """Values past the driver's 64 KB come as BLOB readers, which the next
    statement on the cursor closed: a page over two subscriptions was a 500."""
    body = large_values(settings)
    listed = web.get_json("/api/events")["events"]
    assert [(e["new"]["BODY"], e["old"] and e["old"]["BODY"]) for e in listed] == [(body, None), (body + "x", body)]
    status, _, page = web.request("GET", "/events")
    assert status == 200 and page.count(b'<tr id="event-') == 2


def test_an_event_page_cuts_long_values(settings, web: Console) -> None:
    """A page showed every value whole: a row with a 5 MB BLOB made a 23 MB
    page. The JSON API still gives them whole."""
    body = large_values(settings)
    update = web.get_json("/api/events")["events"][1]
    assert web.get_json(f"/api/events/{update['id']}")["new"]["BODY"] == body + "x"
    status, _, page = web.request("GET", f"/events/{update['id']}")
    html = page.decode()
    assert status == 200 and len(html) < 40_000
    assert f"… (90,003 more characters; /api/events/{update['id']} has them)" in html
    assert f"… (90,002 more characters; /api/events/{update['id']} has them)" in html


def test_actions_retry_discard_retry_dead_pause_and_resume(items, tmp_path: Path, web: Console) -> None:
    dead, failed = dead_and_failed(items, tmp_path)
    status, body = web.post_json(f"/api/events/{failed}/retry")
    assert (status, body["message"]) == (200, f"event {failed} is due for its next attempt now")
    status, body = web.post_json(f"/api/events/{failed}/retry")
    assert status == 200  # still failed, due again
    assert web.post_json(f"/api/events/{failed}/discard")[0] == 200
    assert web.request("GET", f"/api/events/{failed}")[0] == 404
    status, body = web.post_json(f"/api/events/{dead}/discard")
    assert status == 200
    insert(items, 20, 2, "fail")
    drain(items, tmp_path, "--max-attempts", "1")
    status, body = web.post_json("/api/subscriptions/1/retry-dead")
    assert (status, body["message"]) == (200, "2 dead event(s) of subscription 1 queued again")
    pending = web.get_json("/api/events?subscription=1&state=pending")["events"]
    assert [(event["attempts"], event["last_error"]) for event in pending] == [(0, None), (0, None)]
    status, body = web.post_json(f"/api/events/{pending[0]['id']}/retry")
    assert status == 409 and "has not failed" in body["error"]
    assert web.post_json("/api/subscriptions/2/pause") == (200, {"message": "subscription 2 (ITEMS U rec) is paused"})
    assert json.loads(Subs(items).ok("list", "--json"))[1]["paused"] is True
    assert web.post_json("/api/subscriptions/2/pause")[1]["message"].endswith("was already paused")
    assert web.post_json("/api/subscriptions/2/resume")[1]["message"] == "subscription 2 (ITEMS U rec) is resumed"


def test_an_action_on_rows_another_transaction_holds_gives_way_until_it_ends(
    items, tmp_path: Path, web: Console
) -> None:
    """An isql session that touched the event and did not commit: the
    console says so at once instead of waiting, and changes nothing."""
    _, failed = dead_and_failed(items, tmp_path)
    before = web.get_json(f"/api/events/{failed}")
    with uncommitted(items, "UPDATE EVENT_LOG SET ATTEMPTS = ATTEMPTS WHERE EVENT_ID = ?", failed):
        status, body = web.post_json(f"/api/events/{failed}/retry")
        assert status == 409
        assert body["error"] == (
            "another transaction holds these rows right now (a listener at work on them, "
            "or a session that has not committed); try again in a moment"
        )
    assert web.get_json(f"/api/events/{failed}") == before
    status, body = web.post_json(f"/api/events/{failed}/retry")
    assert (status, body["message"]) == (200, f"event {failed} is due for its next attempt now")


def test_a_removed_subscription_cannot_be_paused(items, web: Console) -> None:
    insert(items, 1, 1)
    Subs(items).ok("remove", "items", "I", "rec")
    status, body = web.post_json("/api/subscriptions/1/pause")
    assert status == 409 and "no active subscription 1" in body["error"]


def test_statistics_per_subscription_and_minute(items, tmp_path: Path, web: Console) -> None:
    insert(items, 1, 4)
    insert(items, 5, 1, "fail")
    drain(items, tmp_path, "--max-attempts", "2", "--backoff-min", "300", "--backoff-max", "300")
    answer = web.get_json("/api/stats?minutes=5")
    assert len(answer["minutes"]) == 5
    by_id = {entry["id"]: entry for entry in answer["subscriptions"]}
    assert sum(by_id[1]["handled"]) == 4 and sum(by_id[1]["failed"]) == 1 and sum(by_id[1]["dead"]) == 0
    assert sum(by_id[2]["handled"]) == 0
    assert max(backlog or 0 for backlog in by_id[1]["backlog"]) >= 1  # sampled when the listener started
    status, _, body = web.request("GET", "/api/stats?minutes=100000")
    assert status == 400 and "minutes must be between 1 and 1440" in json.loads(body)["error"]


def test_housekeeping_prunes_old_statistics(db: Database) -> None:
    execute(
        db.settings,
        "INSERT INTO EVENT_STATS (MINUTE_AT, SUB_ID, RECORDER, HANDLED) "
        "VALUES (DATEADD(-2 DAY TO LOCALTIMESTAMP), 1, 'old:1', 5)",
        "INSERT INTO EVENT_STATS (MINUTE_AT, SUB_ID, RECORDER, HANDLED) VALUES (LOCALTIMESTAMP, 1, 'new:1', 5)",
    )
    stats.prune(db)
    assert query(db.settings, "SELECT TRIM(RECORDER) FROM EVENT_STATS") == [("new:1",)]


def test_two_listeners_record_their_own_rows_and_readers_sum_them(db: Database) -> None:
    minute = 29_000_000  # minutes since the epoch
    stats.record(db, "host:1", {(1, minute): [3, 1, 0]})
    stats.record(db, "host:2", {(1, minute): [2, 0, 1]})
    stats.record(db, "host:1", {(1, minute): [1, 0, 0]})
    rows = query(db.settings, "SELECT TRIM(RECORDER), HANDLED, FAILED, DEAD FROM EVENT_STATS ORDER BY 1")
    assert rows == [("host:1", 4, 1, 0), ("host:2", 2, 0, 1)]


def test_a_backlog_sample_counts_each_subscriptions_live_events_up_to_the_bound(items, db: Database) -> None:
    """Pending, failed and in-flight events count, dead ones do not; every
    subscription gets its row, and a second sample in the minute replaces
    the first (one statement for them all: one per subscription took 0.4 s
    with 900 subscriptions)."""
    insert(items, 1, 6)  # subscription 1 (I): events 1 to 6
    execute(items, "UPDATE ITEMS SET NOTE = 'x' WHERE ID <= 2")  # subscription 2 (U): events 7 and 8
    execute(
        items,
        "UPDATE EVENT_LOG SET DEAD = TRUE, DEAD_AT = LOCALTIMESTAMP WHERE EVENT_ID = 1",
        "UPDATE EVENT_LOG SET LAST_ERROR = 'failed', ATTEMPTS = 1 WHERE EVENT_ID = 2",
    )
    latest = (
        "SELECT SUB_ID, BACKLOG FROM EVENT_STATS WHERE RECORDER = 'host:1' "
        "AND MINUTE_AT = (SELECT MAX(MINUTE_AT) FROM EVENT_STATS) ORDER BY SUB_ID"
    )
    stats.record_backlog(db, "host:1", max_counted=4)
    assert query(items, latest) == [(1, 4), (2, 2), (3, 0)]
    execute(items, "DELETE FROM EVENT_LOG WHERE EVENT_ID IN (3, 4, 5)")
    stats.record_backlog(db, "host:1", max_counted=4)
    assert query(items, latest) == [(1, 2), (2, 2), (3, 0)]


def test_counts_stop_at_the_bound_and_say_so(items, db: Database) -> None:
    insert(items, 1, 5)
    execute(items, "UPDATE EVENT_LOG SET DEAD = TRUE, DEAD_AT = LOCALTIMESTAMP WHERE EVENT_ID <= 4")
    insert(items, 6, 6)
    with db.transaction(read_only_tpb()) as cursor:
        inserts = console.overview(cursor, max_counted=3).subscriptions[0]
        assert (inserts.pending, inserts.dead, inserts.at_least) == (3, 3, ("pending", "in_flight", "failed", "dead"))
        inserts = console.overview(cursor, max_counted=10).subscriptions[0]
    assert (inserts.pending, inserts.dead, inserts.at_least) == (7, 4, ())


def test_two_listeners_together_count_every_event_once(items, tmp_path: Path, db: Database, listeners) -> None:
    insert(items, 1, 300, "sleep0.01")  # 3 s for one listener: the other joins in
    first = Listener(items, tmp_path, "--drain", "--mode", "parallel", "--workers", "1", "--batch", "5")
    second = Listener(items, tmp_path, "--drain", "--mode", "parallel", "--workers", "1", "--batch", "5")
    listeners += [first, second]
    # A worker stuck registering for events (seen once under load on fb5, see
    # SOAK-NOTES) is replaced after its stall limit of 120 s: wait beyond it.
    assert first.finish(timeout=200) == 0, first.output()
    assert second.finish(timeout=200) == 0, second.output()
    recorders = query(items, "SELECT COUNT(DISTINCT RECORDER), SUM(HANDLED) FROM EVENT_STATS")
    assert recorders == [(2, 300)]
    with db.transaction(read_only_tpb()) as cursor:
        history = console.stats(cursor, 5)
    assert sum(minute.handled for minute in history[1]) == 300


@pytest.mark.parametrize(
    ("file", "block", "index"),
    [
        ("console", "subscription_events", "L ORDER IX_EVENT_LOG_QUEUE"),
        ("console", "row_events", "L ORDER IX_EVENT_LOG_KEY"),
        ("metrics", "queue_depth", "L ORDER IX_EVENT_LOG_QUEUE"),
    ],
)
def test_lists_and_counts_walk_an_index_from_their_cursor(db: Database, file: str, block: str, index: str) -> None:
    """Pages cost the same whatever the length of the log: no list or count
    reads EVENT_LOG in natural order (a scan) or sorts it."""
    with db.transaction() as cursor:
        statement = cursor.prepare(sql.load(file)[block])
        try:
            plan = statement.plan
        finally:
            statement.free()
    assert index in plan and "NATURAL" not in plan and "SORT" not in plan, plan
