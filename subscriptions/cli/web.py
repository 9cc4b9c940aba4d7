"""`subs web`: serve the operator console (the optional ``web`` extra)."""

from __future__ import annotations

import logging
import re
import signal
import socket

import click

from subscriptions import logs
from subscriptions.delivery.lifeline import stop_signals
from subscriptions.errors import SubsError

from . import app, cli, open_database

_ROOT_PATH = re.compile(r"(/(?!\.+(/|$))[A-Za-z0-9._~-]+)+/?")  # no "." or ".." segment
INSTALL_HINT = "subs web needs the web extra: pip install 'firebird-subs[web]'"


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the server starts, so a port in
    use is a one-line error (and --port 0 picks a free one)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say
        # so, and without it every keep-alive response waits 40 ms for an ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)  # connections wait in the backlog until the server accepts them
    except OSError as exc:
        reason = exc.strerror or exc
        raise SubsError(f"cannot listen on {host}:{port}: {reason}; choose another --host or --port") from None
    return sock


def _checked_root_path(prefix: str) -> str:
    """``prefix`` as the console's addresses carry it: "" or "/a/b", no
    trailing slash. Only characters an address carries as they are: the
    prefix goes into every link."""
    if not prefix or prefix == "/":
        return ""
    if not _ROOT_PATH.fullmatch(prefix):
        raise click.BadParameter(
            f"{prefix!r} is not a path prefix like /subs or /ops/subs (letters, digits, '-', '_', '.', '~')",
            param_hint="--root-path",
        )
    return prefix.rstrip("/")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8400, show_default=True, type=click.IntRange(0, 65535), help="0: any free port.")
@click.option(
    "--token",
    envvar="SUBS_WEB_TOKEN",
    help="The token every request needs [default: a new one, printed in the address]. "
    "Prefer the SUBS_WEB_TOKEN environment variable: arguments are visible to other users.",
)
@click.option("--read-only", is_flag=True, help="Show everything, refuse every action (403).")
@click.option(
    "--root-path",
    default="",
    metavar="PREFIX",
    help="The path a reverse proxy serves the console under, e.g. /subs: the proxy strips it, "
    "the console's links carry it.",
)
@click.option(
    "--log-level",
    type=click.Choice(logs.LEVELS),
    default="INFO",
    show_default=True,
    help="The least important log lines written (INFO: one per request).",
)
@click.pass_context
def web(
    ctx: click.Context, host: str, port: int, token: str | None, read_only: bool, root_path: str, log_level: str
) -> None:
    """Serve the console: subscriptions, events, charts, retry, discard, pause, resume.

    On a loopback address without --token, a token is made and the address
    to open, carrying it, is printed once. Any other address needs --token."""
    try:
        import uvicorn

        from subscriptions.web.app import create_app
        from subscriptions.web.security import Access, generate_token, is_loopback
    except ImportError:
        raise SubsError(INSTALL_HINT) from None
    root_path = _checked_root_path(root_path)
    if token is not None and len(token) < 16:
        raise SubsError("--token must be at least 16 characters long; a random one is safest")
    if token is None and not is_loopback(host):
        raise SubsError(
            f"--host {host} would show application data to the network: give a --token (or SUBS_WEB_TOKEN), "
            "or listen on 127.0.0.1"
        )
    open_database(ctx).close()  # the database is reachable and its schema current
    sock = _bind(host, port)
    logs.configure(level=log_level)
    generated = token is None
    access = Access(token or generate_token(), read_only)
    bound_host, bound_port = sock.getsockname()[:2]
    shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host
    address = f"http://{shown_host}:{bound_port}/"
    shown_token = access.token if generated else "<your token>"
    if root_path:
        click.echo(
            f"subs console: {address} for a proxy that serves it under {root_path}/ "
            f"(open the proxy's address once with ?token={shown_token})"
        )
    elif generated:
        click.echo(f"subs console: {address}?token={access.token}")
    else:
        click.echo(f"subs console: {address} (open it once with ?token={shown_token})")
    config = uvicorn.Config(
        create_app(app(ctx).settings, access),
        root_path=root_path,
        log_level=logging.WARNING,
        access_log=False,
        log_config=None,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    # SIGTERM and SIGINT are how a console is stopped: uvicorn shuts down,
    # then raises the signal again for the handler it found, which is this
    # one (a stop, not an error: no "Aborted!", exit 0, as `subs listen`).
    # A signal before uvicorn takes over stops it as soon as it has started.
    # SIGHUP (its terminal closed), which uvicorn leaves alone, stops it too.
    for stop in stop_signals():
        signal.signal(stop, lambda *_: setattr(server, "should_exit", True))
    server.run(sockets=[sock])
    click.echo("subs console stopped", err=True)
