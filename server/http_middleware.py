"""The API-key check and the response count, as plain ASGI middleware.

Not Starlette's `BaseHTTPMiddleware` (`@app.middleware("http")`): that one wraps every
request's receive channel and runs the app in a task of its own, a cost each request pays
under load (seen in a profile of the server at 32 clients; vLLM's server avoids it too).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.auth import Auth, is_loopback
from server.errors import APIError, error_response
from server.metrics import HTTPCounters


class KeyCheckAndCount:
    """`/v1` routes (and `/metrics` from off this machine) need a valid key when auth is on;
    the key's user goes in `request.state.key_user`. Every response is counted by route
    and status."""

    def __init__(self, app: ASGIApp, auth: Auth, counters: HTTPCounters) -> None:
        self.app = app
        self.auth = auth
        self.counters = counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        peer = scope["client"][0] if scope.get("client") else None
        state = scope.setdefault("state", {})
        state["key_user"] = None
        if path.startswith("/v1") or (path == "/metrics" and not is_loopback(peer)):
            try:
                state["key_user"] = await self.auth.user_for(_header(scope, b"authorization"))
            except APIError as exc:
                self.counters.record("unauthorized", exc.status)
                await error_response(exc)(scope, receive, send)
                return
        status = 500  # what the client gets if the app fails before it answers

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            route = scope.get("route")
            self.counters.record(getattr(route, "path", "unmatched"), status)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None
