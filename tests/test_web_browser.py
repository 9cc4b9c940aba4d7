"""The console in a real browser: Debian's headless Chromium driven by
Selenium (chromium-driver; both installed by dev.sh), against a real `subs
web` process and a real listener, on embedded Firebird and the Firebird 3
server."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from reverseproxy import serving as reverse_proxy
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from subscriptions.db.connection import Database
from subscriptions.schema.version import LATEST

from conftest import EMBEDDED, Subs, execute, query, release_changes_schema_to, wait_until
from listening import Listener, insert
from webconsole import Console

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
STALE_AFTER = 15  # seconds without a refresh before the overview says so (console.css)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """Chromium, with a TMPDIR of the test run's: it leaves its profile's
    singleton directory (org.chromium.Chromium.*) behind even after quit()."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are missing: ./dev.sh test installs them")
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    service = Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))})
    driver = webdriver.Chrome(options=options, service=service)
    yield driver
    driver.quit()


@pytest.fixture
def web(items, tmp_path: Path, browser: WebDriver) -> Iterator[Console]:
    console = Console(items, tmp_path)
    browser.delete_all_cookies()
    browser.get(console.url)  # the token becomes the session cookie
    yield console
    console.stop()


def text_of(browser: WebDriver, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def patiently(browser: WebDriver, timeout: float = 20) -> WebDriverWait[WebDriver]:
    """The overview swaps its figures in every 3 s, so an element found a
    moment ago can be gone: look it up again instead of failing."""
    return WebDriverWait(browser, timeout, ignored_exceptions=(StaleElementReferenceException,))


def click(browser: WebDriver, by: str, selector: str) -> None:
    def clicked(driver: WebDriver) -> bool:
        driver.find_element(by, selector).click()
        return True

    patiently(browser).until(clicked)


def wait_for_text(browser: WebDriver, css: str, expected: str, timeout: float = 20) -> None:
    def shown(driver: WebDriver) -> bool:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        return bool(found) and found[0].text == expected

    try:
        patiently(browser, timeout).until(shown)
    except TimeoutException:
        page = browser.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"{css} never showed {expected!r}; {browser.current_url} shows: {page[:500]}") from None


def test_the_overview_updates_its_figures_without_a_reload(items, web: Console, browser: WebDriver) -> None:
    assert browser.current_url == web.base + "/"  # the token left the address
    wait_for_text(browser, "#pending-1", "0")
    browser.execute_script("window.subsMarker = 'still the same page'")
    insert(items, 1, 3)
    wait_for_text(browser, "#pending-1", "3")
    assert browser.execute_script("return window.subsMarker") == "still the same page"
    wait_for_text(browser, "#subscription-1 .state", "running")
    assert browser.find_elements(By.CSS_SELECTOR, "#subscription-1 svg.chart")


@pytest.mark.parametrize("engine", [EMBEDDED])  # the page's own behaviour, the same on every engine
def test_the_overview_says_when_its_figures_stopped_refreshing(items, web: Console, browser: WebDriver) -> None:
    warning = "#freshness .stale"
    wait_for_text(browser, "#pending-1", "0")
    time.sleep(STALE_AFTER + 2)  # refreshes arrived all along: no warning
    assert not browser.find_element(By.CSS_SELECTOR, warning).is_displayed()
    assert browser.find_element(By.CSS_SELECTOR, "#figures table").value_of_css_property("opacity") == "1"
    release_changes_schema_to(items, LATEST + 1)  # from now on /figures answers 503
    patiently(browser, STALE_AFTER + 20).until(
        lambda driver: driver.find_element(By.CSS_SELECTOR, warning).is_displayed()
    )
    assert text_of(browser, warning) == (
        "Not refreshed since: the console or its database does not answer. Reload the page to see why."
    )
    refreshed = re.match(r"Refreshed at (\d\d:\d\d:\d\d)\.", text_of(browser, "#freshness"))
    assert refreshed, text_of(browser, "#freshness")
    now = datetime.now()
    shown = datetime.combine(now.date(), datetime.strptime(refreshed[1], "%H:%M:%S").time())
    assert (now - shown).total_seconds() % 86400 >= STALE_AFTER  # the last refresh's time, kept
    assert browser.find_element(By.CSS_SELECTOR, "#figures table").value_of_css_property("opacity") == "0.45"
    browser.refresh()
    assert text_of(browser, "h1") == "Not available now"
    assert "now has subs schema version" in text_of(browser, "#refused")


def test_an_event_opens_with_old_and_new_side_by_side(items, web: Console, browser: WebDriver) -> None:
    insert(items, 1, 1, "before")
    execute(items, "UPDATE ITEMS SET NOTE = 'after' WHERE ID = 1")
    browser.refresh()
    click(browser, By.CSS_SELECTOR, "#pending-2")
    (row,) = browser.find_elements(By.CSS_SELECTOR, "table.events tbody tr")
    assert "ITEMS U rec" in row.text and "pending" in row.text and "ID=1" in row.text
    row.find_element(By.CSS_SELECTOR, "a").click()
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Event 2")
    changed = browser.find_element(By.CSS_SELECTOR, "table.values tr.changed")
    assert changed.find_element(By.CSS_SELECTOR, "th").text == "NOTE changed"
    assert changed.find_element(By.CSS_SELECTOR, "td.old").text == '"before"'
    assert changed.find_element(By.CSS_SELECTOR, "td.new").text == '"after"'


def test_retry_gets_a_dead_event_handled_by_a_running_listener(
    items, tmp_path: Path, web: Console, browser: WebDriver, listeners
) -> None:
    subs = Subs(items)
    subs.ok("remove", "items", "UD", "rec")
    # --poll 60: the retry must wake the listener, not wait for its poll.
    listener = Listener(items, tmp_path, "--workers", "1", "--max-attempts", "1", "--poll", "60")
    listeners.append(listener)
    flag = Path(str(listener.record) + ".fail")
    flag.touch()
    insert(items, 7, 1, "fail_flagged")
    wait_until(lambda: query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD") == [(1,)], what="the event to die")
    flag.unlink()
    browser.get(web.base + "/events?state=dead")
    browser.find_element(By.CSS_SELECTOR, "table.events tbody tr a").click()
    assert text_of(browser, "#event-state") == "dead"
    assert "RuntimeError: asked to fail (flagged)" in text_of(browser, "#last-error")
    browser.find_element(By.XPATH, "//button[text()='Retry']").click()
    wait_for_text(browser, "#notice", "event 1 is queued again; its attempts start again from 1")
    listener.wait_for(lambda lines: any(line["phase"] == "done" for line in lines), timeout=20)
    wait_until(lambda: query(items, "SELECT COUNT(*) FROM EVENT_LOG") == [(0,)], what="the event to be handled")
    browser.refresh()
    assert "there is no event 1" in browser.find_element(By.TAG_NAME, "body").text


def test_pause_and_resume_from_the_overview(items, web: Console, browser: WebDriver) -> None:
    click(browser, By.CSS_SELECTOR, "#subscription-1 button")
    wait_for_text(browser, "#notice", "subscription 1 (ITEMS I rec) is paused")
    wait_for_text(browser, "#subscription-1 .state", "paused")
    assert json.loads(Subs(items).ok("list", "--json"))[0]["paused"] is True
    click(browser, By.XPATH, "//tr[@id='subscription-1']//button[text()='Resume']")
    wait_for_text(browser, "#notice", "subscription 1 (ITEMS I rec) is resumed")
    wait_for_text(browser, "#subscription-1 .state", "running")


def test_the_console_behind_a_reverse_proxy_under_a_prefix(items, tmp_path: Path, browser: WebDriver) -> None:
    """Through a real reverse proxy that strips /ops/subs and sends the
    console's own address as Host (nginx's default), as Chromium sends its
    requests: links, the figures' refresh and the pause button all work."""
    token = "r" * 20
    console = Console(items, tmp_path, "--root-path", "/ops/subs", token=token)
    try:
        with reverse_proxy(f"{console.host}:{console.port}", "/ops/subs") as base:
            browser.delete_all_cookies()
            browser.get(f"{base}/?token={token}")
            assert browser.current_url == f"{base}/"
            wait_for_text(browser, "#pending-1", "0")
            insert(items, 1, 2)
            wait_for_text(browser, "#pending-1", "2")  # the figures came through the proxy
            click(browser, By.CSS_SELECTOR, "#subscription-1 button")
            wait_for_text(browser, "#notice", "subscription 1 (ITEMS I rec) is paused")
            assert browser.current_url == f"{base}/"
            click(browser, By.LINK_TEXT, "Pending")
            wait_for_text(browser, "h1", "Events")
            assert browser.current_url == f"{base}/events?state=pending"
            click(browser, By.LINK_TEXT, "1")
            wait_for_text(browser, "#event-state", "pending")
            assert browser.current_url == f"{base}/events/1"
    finally:
        console.stop()


def test_payloads_render_as_text(settings, tmp_path: Path, browser: WebDriver) -> None:
    execute(settings, "CREATE TABLE PAYLOADS (ID INTEGER NOT NULL PRIMARY KEY, BODY VARCHAR(200))")
    Subs(settings).ok("add", "payloads", "I", "rec")
    script = "<script>alert('pwned')</script>"
    image = "<img src=x onerror=\"document.title='pwned'\">"
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("INSERT INTO PAYLOADS VALUES (?, ?)", (1, script))
        cursor.execute("INSERT INTO PAYLOADS VALUES (?, ?)", (2, image))
    console = Console(settings, tmp_path)
    try:
        browser.delete_all_cookies()
        browser.get(console.url)
        for event_id, payload in ((1, script), (2, image)):
            browser.get(f"{console.base}/events/{event_id}")
            assert text_of(browser, "#column-2 td.new") == json.dumps(payload)  # BODY
            assert not browser.find_elements(By.CSS_SELECTOR, "table.values img, table.values script")
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018
        assert browser.title != "pwned"
    finally:
        console.stop()
