"""Client aborts of `umbra serve` (umbra/client_aborts.py): a request whose client left before
its answer — a disconnect mid-body (the body guard sees it), while the completion ran (the route
answers 499 to nobody), mid-stream (an event stream stopped half-way), or a request the edge cut
at its deadline (408). Counted per route template and reason in GET /healthz's `clientAborts`
(with the API token) and logged as one warning line (at most one a second), never a traceback,
a session id or a 5xx. Every error answered on purpose (4xx, and a 5xx such as 503 "cloud
unreachable") is counted by status in /healthz's `errors` (no line: a client may send many; the
suite reads the 5xx of an `umbra serve` it runs there too).

    app.add_middleware(ApiAborts, aborts=app.state.aborts, routes=[...the routers' routes])  # outermost"""

from __future__ import annotations

import logging
from collections import Counter
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from umbra.client_aborts import ClientAborts
from umbra.edge import EDGE_EXTENSION

log = logging.getLogger("umbra.serve")


def api_aborts() -> ClientAborts:
    return ClientAborts(log)


class ApiAborts:
    """Pure ASGI middleware: watches what the client sends and what the app answers."""

    def __init__(self, app, aborts: ClientAborts, routes: list, errors: Counter):
        self.app, self.aborts, self.routes = app, aborts, routes  # routes: the routers' own (their templates)
        self.errors = errors  # status (str) -> errors answered

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body_read = left = started = complete = to_nobody = False
        status = 0

        async def watching_receive():
            nonlocal body_read, left
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_read = True
            elif message["type"] == "http.disconnect":
                left = True
            return message

        async def watching_send(message):
            nonlocal started, complete, to_nobody, status
            if message["type"] == "http.response.start":
                started, to_nobody = True, left  # an answer to a client that left (a 499): nobody reads it
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True
            await send(message)

        try:
            await self.app(scope, watching_receive, watching_send)
        except ClientDisconnect:  # a route that read the body itself
            left = True
        edge = scope.get("extensions", {}).get(EDGE_EXTENSION, {})
        reason = edge.get("reason")
        if reason is None and (to_nobody or edge.get("gone") or (left and not complete)):
            reason = ("disconnect mid-body" if not body_read else
                      "disconnect mid-stream" if started and not (to_nobody or edge.get("gone")) else "disconnect")
        if reason is not None:
            self.aborts.count(f"{scope['method']} {self._template(scope)}", reason)
        elif status >= 400 and scope["path"] != "/healthz":  # its 503 says "not ready", as it should
            self.errors[str(status)] += 1

    def _template(self, scope) -> str:
        """The route's path template (never the path itself: it may carry a session id)."""
        if isinstance(path := getattr(scope.get("route"), "path", None), str):
            return path
        return next((route.path for route in self.routes if route.matches(scope)[0] is Match.FULL), "unmatched")
