"""A `subs web` process on a free port, and plain HTTP requests to it."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from subscriptions.db.settings import ConnectionSettings


class Console:
    """`subs web --port 0` for ``settings``; ``url`` is the address it
    printed (carrying its generated token unless ``token`` is given)."""

    def __init__(self, settings: ConnectionSettings, tmp_path: Path, *args: str, token: str | None = None) -> None:
        env = {
            **os.environ,
            "ISC_USER": settings.effective_user,
            "ISC_PASSWORD": settings.password or "",
            "SUBS_WEB_TOKEN": token or "",
        }
        if token is None:
            env.pop("SUBS_WEB_TOKEN")
        self.log_path = tmp_path / f"web-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "subscriptions", "-d", settings.dsn, "web", "--port", "0", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line.startswith("subs console: "):
            self.process.kill()
            raise AssertionError(f"subs web did not start: {line!r} {self.log_path.read_text()}")
        self.url = line.split(": ", 1)[1].split(" ")[0].strip()
        parts = urlsplit(self.url)
        self.host, self.port = parts.hostname or "", parts.port or 0
        self.base = f"http://{parts.netloc}"
        self.token = token or parts.query.removeprefix("token=")

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        bearer: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request (redirects are not followed); with ``bearer`` it
        carries the token as Authorization: Bearer."""
        sent = {**({"Authorization": f"Bearer {self.token}"} if bearer else {}), **(headers or {})}
        return request(self.host, self.port, method, path, headers=sent, body=body)

    def get_json(self, path: str) -> object:
        status, _, body = self.request("GET", path)
        assert status == 200, (status, body)
        return json.loads(body)

    def get_text(self, path: str) -> str:
        status, _, body = self.request("GET", path)
        assert status == 200, (status, body)
        return body.decode()

    def post_json(self, path: str) -> tuple[int, dict]:
        status, _, body = self.request("POST", path)
        return status, json.loads(body)

    def log_text(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout:
            self.process.stdout.close()
        self.log.close()


def request(
    host: str, port: int, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request to host:port (redirects are not followed): status,
    headers by lower-case name, body."""
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()
