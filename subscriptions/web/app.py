"""The console's web application (Starlette): HTML pages and a JSON API,
both over one query layer (ops/console.py).

Pages and API reads run in the server's thread pool, each on an attachment
taken from a small pool for one short read-only transaction; actions are
POST only and run in one short NO WAIT transaction. Nothing is held
between requests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from importlib import resources
from typing import Any, cast
from urllib.parse import quote, unquote, urlencode

from firebird.driver import Cursor, DatabaseError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from subscriptions.db.connection import Database, read_only_tpb
from subscriptions.db.errors import first_line, missing_right
from subscriptions.db.settings import ConnectionSettings
from subscriptions.errors import SubsError
from subscriptions.events import MAX_EVENT_ID, dumps
from subscriptions.ops import console, console_actions
from subscriptions.ops.status import PARTIAL_VIEW, long_open_transaction
from subscriptions.ops.text_table import describe_age
from subscriptions.schema import version as schema_version

from .attachments import Attachments
from .charts import chart
from .security import Access, Guard, Refused, check_csrf, refusal, root_path, set_cookie

NOTICE_COOKIE = "subs_notice"
HTMX = "htmx-2.0.8.min.js"


# What a refusal's page is headed with, by status.
HEADINGS = {
    400: "Bad request",
    401: "The console's token is needed",
    403: "Refused",
    404: "Not found",
    405: "Not allowed",
    503: "Not available now",
}

# The pages cut a value's JSON after this many characters (a row with a
# 5 MB BLOB made a 23 MB page); the JSON API gives it whole.
SHOWN_CHARS = 10_000


def _shown(value: Any, event_id: int | None = None) -> str:
    """A captured value as the pages show it: its JSON, cut when long."""
    text = dumps(value)
    if len(text) <= SHOWN_CHARS:
        return text
    whole = f"/api/events/{event_id}" if event_id is not None else "the JSON API"
    return f"{text[:SHOWN_CHARS]}… ({len(text) - SHOWN_CHARS:,} more characters; {whole} has them)"


class ApiResponse(JSONResponse):
    """JSON with captured values encoded as ``event.to_json()`` encodes them."""

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(resources.files("subscriptions.web").joinpath("templates")))
    templates.env.autoescape = True
    templates.env.filters["value"] = _shown
    templates.env.filters["count"] = lambda summary, name: (
        f"{getattr(summary, name):,}" + ("+" if name in summary.at_least else "")
    )
    templates.env.filters["age"] = describe_age
    templates.env.globals["htmx"] = HTMX
    return templates


def _number(request: Request, name: str) -> int | None:
    text = request.query_params.get(name, "")
    if not text:
        return None
    try:
        number = int(text)
    except ValueError:
        raise Refused(400, f"{name} must be a whole number, not {text!r}") from None
    if abs(number) > MAX_EVENT_ID:
        raise Refused(400, f"{name} must be a whole number up to {MAX_EVENT_ID}, not {text!r}")
    return number


def _number_or(request: Request, name: str, default: int) -> int:
    given = _number(request, name)
    return default if given is None else given


def _filter(request: Request) -> console.EventFilter:
    return console.EventFilter(
        state=request.query_params.get("state") or None,
        subscription=_number(request, "subscription"),
        table=request.query_params.get("table") or None,
        key=tuple(value for value in request.query_params.getlist("key") if value),
    )


class Console:
    """The routes, with what they share: the attachments and the templates."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.attachments = Attachments(settings)
        self.templates = _templates()
        self.schema_checked_at = time.monotonic()  # `subs web` checked it before serving
        self.schema_changed: str | None = None

    def read(self, work: Callable[[Cursor], Any]) -> Any:
        """Run ``work`` in one read-only transaction on a pooled attachment."""
        return self.run(lambda db: _in_read_only_transaction(db, work))

    def run(self, work: Callable[[Database], Any]) -> Any:
        """Run ``work`` on a pooled attachment; the query layer's refusals
        become HTTP answers."""
        try:
            with self.attachments.use() as db:
                self._refuse_a_changed_schema(db)
                return work(db)
        except console.NotFound as exc:
            raise Refused(404, str(exc)) from None
        except SubsError as exc:
            raise Refused(400, str(exc)) from None
        except DatabaseError as exc:
            refused = missing_right(exc, self.attachments.settings.effective_user)
            if refused is not None:
                raise Refused(403, str(refused)) from None
            raise Refused(503, f"the database: {first_line(exc)}") from None

    def _refuse_a_changed_schema(self, db: Database) -> None:
        """Once `subs init` of another release has changed the schema, every
        request is refused: this release's queries and actions are not made
        for it (looked at every schema_version.CHECK_EVERY)."""
        if self.schema_changed is None and time.monotonic() >= self.schema_checked_at + schema_version.CHECK_EVERY:
            self.schema_checked_at = time.monotonic()
            self.schema_changed = schema_version.changed_since_start(db, "console")
        if self.schema_changed is not None:
            raise Refused(503, self.schema_changed)

    def page(self, request: Request, template: str, **context: Any) -> Response:
        """A page, with the notice of the action that led here (once)."""
        notice = request.cookies.get(NOTICE_COOKIE)
        response = self.templates.TemplateResponse(
            request,
            template,
            {
                "root": root_path(request),
                "csrf": request.app.state.access.csrf,
                "read_only": request.app.state.access.read_only,
                "notice": unquote(notice) if notice else None,
                **context,
            },
        )
        if notice:
            set_cookie(response, request, NOTICE_COOKIE, "", max_age=0)  # shown once
        return response

    def refused(self, request: Request, status: int, message: str) -> Response:
        """The page of a refusal, with the notice of the action that led
        here: a retried event is often gone (handled) when its page comes back."""
        response = self.page(request, "refused.html", heading=HEADINGS.get(status, "Refused"), message=message)
        response.status_code = status
        return response

    # -- pages ---------------------------------------------------------------------------

    def _figures(self) -> dict[str, Any]:
        def work(cursor: Cursor) -> dict[str, Any]:
            figures = console.overview(cursor)
            history = console.stats(cursor, 60)
            return {
                "summaries": figures.subscriptions,
                "charts": {s.id: chart(history.get(s.id, [])) for s in figures.subscriptions},
                "refreshed": datetime.now().strftime("%H:%M:%S"),
                "open_transaction": long_open_transaction(cursor),
                "partial_view": None if figures.sees_every_attachment else PARTIAL_VIEW,
            }

        return dict(self.read(work))

    def overview(self, request: Request) -> Response:
        return self.page(request, "overview.html", **self._figures())

    def figures(self, request: Request) -> Response:
        return self.page(request, "figures.html", **self._figures())

    def events(self, request: Request) -> Response:
        """A page of events; a bad filter is shown on the page, with no events."""

        def work(cursor: Cursor) -> tuple[console.EventPage, dict[int, console.SubscriptionName]]:
            return console.events(cursor, chosen, limit=limit, after=after), console.subscriptions(cursor)

        chosen = console.EventFilter()
        try:
            chosen = _filter(request)
            limit = _number_or(request, "limit", console.PAGE_SIZE)
            after = _number_or(request, "after", 0)
            page, subscriptions = self.read(work)
            error = None
        except Refused as refused:
            if refused.status != 400:
                raise
            page, subscriptions = console.EventPage([], None), self.read(console.subscriptions)
            error = refused.message
        return self.page(
            request,
            "events.html",
            page=page,
            chosen=chosen,
            error=error,
            subscriptions=subscriptions,
            next_query=_with(request, after=page.next) if page.next else None,
        )

    def event(self, request: Request) -> Response:
        event_id = int(request.path_params["event_id"])

        def work(cursor: Cursor) -> tuple[console.LoggedEvent, console.SubscriptionName]:
            found = console.event(cursor, event_id)
            return found, console.subscription(cursor, found.subscription)

        found, subscription = self.read(work)
        columns = list(dict.fromkeys([*(found.old or {}), *(found.new or {})]))
        return self.page(request, "event.html", event=found, subscription=subscription, columns=columns)

    # -- API ----------------------------------------------------------------------------

    def api_subscriptions(self, request: Request) -> Response:
        return ApiResponse([summary.as_dict() for summary in self.read(console.overview).subscriptions])

    def api_events(self, request: Request) -> Response:
        chosen = _filter(request)
        limit = _number_or(request, "limit", console.PAGE_SIZE)
        after = _number_or(request, "after", 0)
        page = self.read(lambda cursor: console.events(cursor, chosen, limit=limit, after=after))
        return ApiResponse({"events": [e.as_dict() for e in page.events], "next": page.next})

    def api_event(self, request: Request) -> Response:
        event_id = int(request.path_params["event_id"])
        return ApiResponse(self.read(lambda cursor: console.event(cursor, event_id)).as_dict())

    def api_stats(self, request: Request) -> Response:
        minutes = _number_or(request, "minutes", 60)
        history: dict[int, list[console.MinuteStats]] = self.read(lambda cursor: console.stats(cursor, minutes))
        axis = next(iter(history.values()), [])
        return ApiResponse(
            {
                "minutes": [m.minute for m in axis],
                "subscriptions": [
                    {
                        "id": sub_id,
                        "handled": [m.handled for m in entries],
                        "failed": [m.failed for m in entries],
                        "dead": [m.dead for m in entries],
                        "backlog": [m.backlog for m in entries],
                    }
                    for sub_id, entries in history.items()
                ],
            }
        )

    async def act(self, request: Request) -> Response:
        """Every action: JSON for API clients; a redirect back to the page,
        with a notice of what was done, for the pages' forms."""
        form = await request.form()
        check_csrf(request, form)
        name = request.path_params["action"]
        target = int(request.path_params["target"])
        actions: dict[str, Callable[[Database], str]] = {
            "events/retry": lambda db: console_actions.retry(db, target),
            "events/discard": lambda db: console_actions.discard(db, target),
            "subscriptions/retry-dead": lambda db: console_actions.retry_dead(db, target),
            "subscriptions/pause": lambda db: console_actions.set_paused(db, target, True),
            "subscriptions/resume": lambda db: console_actions.set_paused(db, target, False),
        }
        action = actions.get(f"{request.path_params['kind']}/{name}")
        if action is None:
            raise Refused(404, f"there is no action {name!r}")
        try:
            message = await run_in_threadpool(self.run, action)
        except Refused as refused:
            status = 409 if refused.status == 400 else refused.status
            if "next" not in form:
                raise Refused(status, refused.message) from None
            message = refused.message
        if "next" not in form:
            return ApiResponse({"message": message})
        response = RedirectResponse(root_path(request) + _local(str(form["next"])), status_code=303)
        set_cookie(response, request, NOTICE_COOKIE, quote(message), max_age=60)
        return response


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such page) answered as the console's."""
    http = cast(HTTPException, exc)  # the handler of HTTPException only
    message = f"there is no page {request.url.path}" if http.status_code == 404 else http.detail
    return refusal(request, http.status_code, message)


def _in_read_only_transaction(db: Database, work: Callable[[Cursor], Any]) -> Any:
    with db.transaction(read_only_tpb()) as cursor:
        return work(cursor)


def _with(request: Request, **changes: object) -> str:
    """The request's query string with ``changes`` made."""
    kept = [(key, value) for key, value in request.query_params.multi_items() if key not in changes]
    return urlencode([*kept, *((key, str(value)) for key, value in changes.items())])


def _local(path: str) -> str:
    """Only this console's own pages are redirected to."""
    return path if path.startswith("/") and not path.startswith("//") else "/"


def create_app(settings: ConnectionSettings, access: Access) -> Starlette:
    routes = Console(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        routes.attachments.close()

    app = Starlette(
        routes=[
            Route("/", routes.overview),
            Route("/figures", routes.figures),
            Route("/events", routes.events),
            Route("/events/{event_id:int}", routes.event),
            Route("/api/subscriptions", routes.api_subscriptions),
            Route("/api/events", routes.api_events),
            Route("/api/events/{event_id:int}", routes.api_event),
            Route("/api/stats", routes.api_stats),
            Route("/api/{kind:str}/{target:int}/{action:str}", routes.act, methods=["POST"]),
            Mount("/static", StaticFiles(packages=[("subscriptions.web", "static")]), name="static"),
        ],
        middleware=[Middleware(Guard)],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.access = access
    app.state.refusal_page = routes.refused
    return app
