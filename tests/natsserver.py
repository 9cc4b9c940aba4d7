"""A real NATS server with JetStream (Debian's ``nats-server``) on a free
port of 127.0.0.1, its store in a temporary directory, for the relay tests.
It can be killed and started again on the same port and store."""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import nats

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class NatsServer:
    def __init__(
        self,
        directory: Path,
        *,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        max_payload: int | None = None,
    ) -> None:
        executable = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not Path(executable).exists():
            raise RuntimeError("nats-server is not installed; run ./dev.sh test")
        self.executable = executable
        self.directory = directory
        self.port = _free_port()
        self.user, self.password, self.token = user, password, token
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "nats-server.log"
        config = f'port: {self.port}\nhost: "{HOST}"\njetstream {{ store_dir: "{directory / "store"}" }}\n'
        if user:
            config += f'authorization {{ user: "{user}", password: "{password}" }}\n'
        if token:
            config += f'authorization {{ token: "{token}" }}\n'
        if max_payload:
            config += f"max_payload: {max_payload}\n"
        self.config = directory / "nats.conf"
        self.config.write_text(config)
        self.start()

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([self.executable, "-c", str(self.config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while not self._listening():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start: {self.log.read_text()[-1000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def pause(self) -> None:
        """Stop the server (SIGSTOP) and wait until every thread of it has
        stopped. The signal wakes one thread, which then stops the others;
        on a busy machine that thread may run only after others have
        answered a few more messages."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.process.pid}/task")
        deadline = time.monotonic() + 10
        while not all(_stopped(task) for task in tasks.iterdir()):
            if time.monotonic() > deadline:
                raise RuntimeError("nats-server did not stop within 10 s of SIGSTOP")
            time.sleep(0.01)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def _listening(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.2)
            return sock.connect_ex((HOST, self.port)) == 0

    def jetstream(self, call: str, *args: Any, **kwargs: Any) -> Any:
        """Run one JetStream management call (``add_stream``, ...) on a
        connection of its own."""

        async def run() -> Any:
            client = await nats.connect(self.url, user=self.user, password=self.password, token=self.token)
            try:
                return await getattr(client.jetstream(), call)(*args, **kwargs)
            finally:
                await client.close()

        return asyncio.run(run())

    def messages(self, stream: str) -> list[Any]:
        """Every message in ``stream``, in stream order."""

        async def run() -> list[Any]:
            client = await nats.connect(self.url, user=self.user, password=self.password, token=self.token)
            try:
                jetstream = client.jetstream()
                info = await jetstream.stream_info(stream)
                if not info.state.messages:
                    return []
                return [
                    await jetstream.get_msg(stream, sequence)
                    for sequence in range(info.state.first_seq, info.state.last_seq + 1)
                ]
            finally:
                await client.close()

        return asyncio.run(run())


def _stopped(task: Path) -> bool:
    """Whether a thread (/proc/PID/task/TID) is stopped: state T in its stat,
    after the parenthesised command name."""
    try:
        return (task / "stat").read_text().rpartition(")")[2].split()[0] == "T"
    except FileNotFoundError:  # the thread ended
        return True
