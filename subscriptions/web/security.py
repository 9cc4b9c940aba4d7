"""Who may use the console, and the headers every answer carries.

Every request needs the token: as ``Authorization: Bearer T``, or from the
session cookie that a page opened once with ``?token=T`` sets (HttpOnly,
SameSite=Strict; the redirect drops the token from the address). A
state-changing request authenticated by the cookie also needs the CSRF
token the pages embed in their forms (``check_csrf``); any POST from another
origin is refused first. The cookie and CSRF values are derived from the
token, so a restart with the same token keeps sessions valid and no state
is kept. The request log never shows the token.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

log = logging.getLogger("subs.web")

SESSION_COOKIE = "subs_console"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not no-referrer: with it, browsers send "Origin: null" on the console's own forms.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_SAFE_METHODS = ("GET", "HEAD")


def generate_token() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    token: str
    read_only: bool = False

    def _derive(self, purpose: str) -> str:
        return hmac.new(self.token.encode(), purpose.encode(), hashlib.sha256).hexdigest()

    @property
    def session(self) -> str:
        return self._derive("session")

    @property
    def csrf(self) -> str:
        return self._derive("csrf")

    def matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def authenticated_by(self, request: Request) -> str | None:
        """ "bearer", "cookie", or None when the request does not carry the token."""
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.matches(credentials.strip()):
            return "bearer"
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self.session.encode()):
            return "cookie"
        return None


class Refused(Exception):
    """A request the console answers with ``status`` and ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def root_path(request: Request) -> str:
    """The prefix a reverse proxy serves the console under (`subs web
    --root-path`), "" without one: the console's own addresses start with it."""
    return str(request.scope.get("root_path", ""))


def set_cookie(response: Response, request: Request, name: str, value: str, max_age: int | None = None) -> None:
    """A cookie for this console's addresses only (two consoles under two
    prefixes of one host keep their own sessions), HttpOnly, SameSite=Strict,
    and Secure when the browser came over https (a TLS proxy that says so in
    X-Forwarded-Proto: uvicorn believes it from this host, FORWARDED_ALLOW_IPS).
    ``max_age`` 0 deletes it."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=root_path(request) + "/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def refusal(request: Request, status: int, message: str) -> Response:
    """JSON for the API; for a browser a page in the console's layout (a
    bare line of text left its user without a way back); plain text for
    other clients."""
    if request.url.path.removeprefix(root_path(request)).startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    if "text/html" in request.headers.get("accept", ""):
        page: Response = request.app.state.refusal_page(request, status, message)
        return page
    return PlainTextResponse(message + "\n", status_code=status)


def check_csrf(request: Request, form: Any) -> None:
    """A cookie-authenticated action must carry the pages' CSRF token."""
    if request.state.authenticated_by != "cookie":
        return
    access: Access = request.app.state.access
    given = str(form.get("csrf") or request.headers.get("x-csrf-token") or "")
    if not hmac.compare_digest(given.encode(), access.csrf.encode()):
        raise Refused(403, "this action needs the console's CSRF token; use the console's own buttons")


def _redacted(request: Request) -> str:
    query = [(key, "***" if key == "token" else value) for key, value in request.query_params.multi_items()]
    return request.url.path + ("?" + urlencode(query) if query else "")


def _cross_origin(request: Request) -> bool:
    """A request a browser sent from a page not the console's own. Its
    Sec-Fetch-Site, which browsers set and pages cannot, says so whatever a
    reverse proxy did to Host (nginx sends the upstream's address, and the
    Origin of every form then differed: every action was refused); a browser
    too old to send it is judged by its Origin against the Host seen here."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return origin is not None and origin != own


class Guard(BaseHTTPMiddleware):
    """Authentication, read-only mode, security headers and the request log."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        started = time.monotonic()
        try:
            response = await self._answer(request, call_next)
        except Refused as refused:
            response = refusal(request, refused.status, refused.message)
        response.headers.update(HEADERS)
        log.info(
            "%s %s %s %.0fms",
            request.method,
            _redacted(request),
            response.status_code,
            (time.monotonic() - started) * 1000,
        )
        return response

    async def _answer(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        access: Access = request.app.state.access
        if request.method not in (*_SAFE_METHODS, "POST"):
            raise Refused(405, f"{request.method} is not supported; actions are POST requests")
        if request.method == "POST" and _cross_origin(request):
            raise Refused(403, "requests from other sites are refused")
        given = request.query_params.get("token")
        if given is not None and request.method in _SAFE_METHODS:
            if not access.matches(given):
                raise Refused(401, "wrong token; use the address `subs web` printed")
            kept = [(key, value) for key, value in request.query_params.multi_items() if key != "token"]
            target = request.url.path + ("?" + urlencode(kept) if kept else "")
            response = RedirectResponse(target, status_code=303)
            set_cookie(response, request, SESSION_COOKIE, access.session)
            return response
        via = access.authenticated_by(request)
        if via is None:
            raise Refused(
                401, "the console needs its token: open the address `subs web` printed, or send Authorization: Bearer"
            )
        if request.method == "POST" and access.read_only:
            raise Refused(403, "the console is read-only (subs web --read-only); actions are refused")
        request.state.authenticated_by = via
        return await call_next(request)
