"""The /admin page's door: the Summary rendered as HTML on the server (views/dashboard.py), refreshed by a few lines
of script.

/admin is an empty shell anyone who reaches the listener may load; its contents come from /admin/view, which needs
the operator token, sent as a bearer header, never a cookie (docs/observability.md). Nothing is fetched from
elsewhere, and a Content-Security-Policy lets the page run only its own script.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from aiohttp import web

from llmgw.control.http.keys_api import BadRequest
from llmgw.control.views.dashboard import Rows, render_view
from llmgw.control.views.dashboard_assets import APP_JS, ICON, SHELL, STYLE
from llmgw.control.views.summary import Summary

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "X-Frame-Options": "DENY"}


def page_of(request: web.Request) -> int:
    """The `page` query parameter: a whole number from 1 (1 when absent); anything else is refused."""
    raw = request.query.get("page", "1")
    if not re.fullmatch(r"[0-9]{1,6}", raw) or int(raw) < 1:
        raise BadRequest(f"page must be a whole number from 1, not {raw[:20]!r}")
    return int(raw)


def dashboard_routes(summary: Callable[[], Awaitable[Summary]]) -> list[web.RouteDef]:
    async def shell(_: web.Request) -> web.Response:
        return web.Response(text=SHELL, content_type="text/html", headers=HEADERS)

    async def script(_: web.Request) -> web.Response:
        return web.Response(text=APP_JS, content_type="text/javascript", headers=HEADERS)

    async def style(_: web.Request) -> web.Response:
        return web.Response(text=STYLE, content_type="text/css", headers=HEADERS)

    async def icon(_: web.Request) -> web.Response:
        return web.Response(text=ICON, content_type="image/svg+xml", headers=HEADERS)

    rows = Rows()  # each line's row, kept across views

    async def view(request: web.Request) -> web.Response:
        page = page_of(request)
        return web.Response(text=render_view(await summary(), page, rows), content_type="text/html", headers=HEADERS)

    return [web.get("/admin", shell), web.get("/admin/app.js", script), web.get("/admin/style.css", style),
            web.get("/admin/icon.svg", icon),
            web.get("/admin/view", view)]
