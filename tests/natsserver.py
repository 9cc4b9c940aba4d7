"""A real NATS server with JetStream (Debian's ``nats-server``) on a free
port of 127.0.0.1, its store in a temporary directory, for the relay tests.
It can be killed and started again on the same port and store. With
``creds=True`` it trusts an operator of its own (decentralized JWT
authentication, as NGS and nsc set it up) and writes a user's credentials
file."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import nats
import nkeys

HOST = "127.0.0.1"
UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "conn": -1, "leaf": -1}
JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def _keypair(prefix: int) -> nkeys.KeyPair:
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(issuer: nkeys.KeyPair, subject: nkeys.KeyPair, name: str, nats_claims: dict[str, Any]) -> str:
    """A NATS JWT: ``subject``'s claims signed by ``issuer`` (ed25519-nkey)."""
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public_key.decode(),
        "sub": subject.public_key.decode(),
        "name": name,
        "nats": {**nats_claims, "version": 2},
    }
    digest = hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signed = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode()) + "." + _b64(json.dumps(claims).encode())
    return signed + "." + _b64(issuer.sign(signed.encode()))


def operator_setup(directory: Path, user: str = "subs") -> tuple[str, Path]:
    """The server configuration that trusts a new operator, its system
    account and an account with JetStream, and a credentials file of a user
    of that account (its JWT and its seed)."""
    operator = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
    system, account = _keypair(nkeys.PREFIX_BYTE_ACCOUNT), _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    member = _keypair(nkeys.PREFIX_BYTE_USER)
    accounts = {
        system.public_key.decode(): _jwt(operator, system, "SYS", {"type": "account", "limits": UNLIMITED}),
        account.public_key.decode(): _jwt(
            operator, account, "APP", {"type": "account", "limits": {**UNLIMITED, **JETSTREAM}}
        ),
    }
    user_jwt = _jwt(account, member, user, {"type": "user", "subs": -1, "data": -1, "payload": -1})
    creds = directory / f"{user}.creds"
    creds.write_text(
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{member.seed.decode()}\n------END USER NKEY SEED------\n"
    )
    preload = "".join(f'  {key}: "{token}"\n' for key, token in accounts.items())
    config = (
        f'operator: "{_jwt(operator, operator, "TEST", {"type": "operator"})}"\n'
        f"system_account: {system.public_key.decode()}\nresolver: MEMORY\nresolver_preload: {{\n{preload}}}\n"
    )
    return config, creds


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
        creds: bool = False,
        max_payload: int | None = None,
    ) -> None:
        executable = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not Path(executable).exists():
            raise RuntimeError("nats-server is not installed; run ./dev.sh test")
        self.executable = executable
        self.directory = directory
        self.port = _free_port()
        self.user, self.password, self.token = user, password, token
        self.creds: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "nats-server.log"
        config = f'port: {self.port}\nhost: "{HOST}"\njetstream {{ store_dir: "{directory / "store"}" }}\n'
        if user:
            config += f'authorization {{ user: "{user}", password: "{password}" }}\n'
        if token:
            config += f'authorization {{ token: "{token}" }}\n'
        if creds:
            trust, self.creds = operator_setup(directory)
            config += trust
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

    async def _connect(self) -> Any:
        credentials = str(self.creds) if self.creds else None
        return await nats.connect(
            self.url, user=self.user, password=self.password, token=self.token, user_credentials=credentials
        )

    def jetstream(self, call: str, *args: Any, **kwargs: Any) -> Any:
        """Run one JetStream management call (``add_stream``, ...) on a
        connection of its own."""

        async def run() -> Any:
            client = await self._connect()
            try:
                return await getattr(client.jetstream(), call)(*args, **kwargs)
            finally:
                await client.close()

        return asyncio.run(run())

    def messages(self, stream: str) -> list[Any]:
        """Every message in ``stream``, in stream order."""

        async def run() -> list[Any]:
            client = await self._connect()
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
