"""The operator console in the browser (`subs web`), the optional ``web``
extra: Starlette, Jinja2 and uvicorn.

Lives here: the routes of the pages and the JSON API over the query layer
``ops/console.py`` (``app``), the pool of attachments (``attachments``),
the token, cookie, CSRF and security headers (``security``), the SVG charts
(``charts``), the templates and the static files (the vendored htmx, the
stylesheet).

May import: ``subscriptions.ops``, ``subscriptions.capture``,
``subscriptions.schema`` (whether the schema is still this release's),
``subscriptions.db`` and the top-level leaves. Only ``subscriptions.cli``
imports it, when `subs web` runs.
"""
