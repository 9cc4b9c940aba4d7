"""Makes docs/console.png, the README's picture of `subs web`: a throw-away
embedded database, two tables with subscriptions, a real listener handling
what a writer inserts for a few minutes (some of it failing), then the
console in headless Chromium (Debian's chromium and chromium-driver).

    .venv/bin/python docs/screenshot.py [--minutes 3]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

HERE = Path(__file__).resolve().parent
PLUGIN = """
import random, time
from subscriptions import hookimpl

@hookimpl
def register_handlers(register):
    register("notify_shop", notify_shop)
    register("welcome_mail", welcome_mail)

def notify_shop(event):
    time.sleep(random.uniform(0.005, 0.02))
    if (event.new or {}).get("STATUS") == "broken":
        raise ConnectionError("shop endpoint https://shop.example/hooks answered 503")

def welcome_mail(event):
    time.sleep(random.uniform(0.01, 0.05))
"""
TABLES = (
    "CREATE TABLE CUSTOMERS (ID INTEGER NOT NULL PRIMARY KEY, NAME VARCHAR(60), EMAIL VARCHAR(80))",
    "CREATE TABLE ORDERS (ID INTEGER NOT NULL PRIMARY KEY, CUSTOMER INTEGER, TOTAL NUMERIC(12,2), STATUS VARCHAR(20))",
)


def subs(database: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "subscriptions", "-d", database, *args], stdout=subprocess.PIPE, text=True
    )


def write(settings: ConnectionSettings, seconds: float) -> None:
    """Customers and orders at a rate that rises and falls; one order in 40 breaks."""
    started = time.monotonic()
    key = 0
    with Database(settings) as db:
        while time.monotonic() - started < seconds:
            phase = (time.monotonic() - started) / seconds
            burst = 1 + int(8 * (1 - abs(2 * phase - 1)))
            with db.transaction() as cursor:
                for _ in range(burst):
                    key += 1
                    cursor.execute(
                        "INSERT INTO CUSTOMERS VALUES (?, ?, ?)", (key, f"Customer {key}", f"c{key}@example.com")
                    )
                    status = "broken" if key % 40 == 0 else "new"
                    cursor.execute(
                        "INSERT INTO ORDERS VALUES (?, ?, ?, ?)", (key, key, round(random.uniform(5, 500), 2), status)
                    )
                    if key % 3 == 0:
                        cursor.execute("UPDATE ORDERS SET STATUS = 'paid' WHERE ID = ? AND STATUS = 'new'", (key,))
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the writer writes")
    parser.add_argument("--output", default=str(HERE / "console.png"))
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        database = os.path.join(directory, "console.fdb")
        settings = ConnectionSettings(database)
        subs(database, "init", "--create").wait()
        with Database(settings) as db:
            for statement in TABLES:
                with db.transaction() as cursor:
                    cursor.execute(statement)
        for args in (("orders", "IU", "notify_shop"), ("customers", "I", "welcome_mail")):
            subs(database, "add", *args).wait()
        plugin = Path(directory, "shop.py")
        plugin.write_text(PLUGIN)
        listener = subs(
            database, "listen", "--plugin", str(plugin), "--mode", "parallel", "--workers", "2",
            "--max-attempts", "2", "--backoff-min", "5", "--log-level", "ERROR",
        )  # fmt: skip
        console = subs(database, "web", "--port", "0", "--log-level", "WARNING")
        try:
            address = (console.stdout.readline() if console.stdout else "").split(": ", 1)[1].strip()
            write(settings, options.minutes * 60)
            time.sleep(8)  # the last retries, and the statistics written
            subs(database, "pause", "customers", "I", "welcome_mail").wait()
            with Database(settings) as db, db.transaction() as cursor:
                for key in range(100_000, 100_012):
                    cursor.execute("INSERT INTO CUSTOMERS VALUES (?, ?, ?)", (key, f"Late {key}", None))
            chrome = webdriver.ChromeOptions()
            for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1500,520"):
                chrome.add_argument(argument)
            chrome.binary_location = "/usr/bin/chromium"
            # Chromium leaves its profile's singleton directory in TMPDIR.
            service = Service("/usr/bin/chromedriver", env={**os.environ, "TMPDIR": directory})
            driver = webdriver.Chrome(options=chrome, service=service)
            try:
                driver.get(address)
                time.sleep(1)
                driver.save_screenshot(options.output)
            finally:
                driver.quit()
        finally:
            for process in (console, listener):
                process.terminate()
                process.wait(30)
    print(f"wrote {options.output}")


if __name__ == "__main__":
    main()
