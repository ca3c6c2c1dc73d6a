"""The API-key check and the response count, as plain ASGI middleware.

Not Starlette's `BaseHTTPMiddleware` (`@app.middleware("http")`): that one wraps every
request's receive channel and runs the app in a task of its own, a cost each request pays
under load (seen in a profile of the server at 32 clients; vLLM's server avoids it too).
"""

from __future__ import annotations

import os

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.access.admin import AdminGate, is_admin_path, is_screen_path
from server.access.auth import Auth, is_loopback
from server.access.body_credentials import BodyTooLarge, lift, wants_lift
from server.http.asgi import route_path, scope_header
from server.http.errors import APIError, error_response, speaks_anthropic
from server.http.metrics import HTTPCounters

# A request's limits: a 128k-token context is about half a megabyte of text, so 16 MiB is
# far past any real request and short of what one request can do to a small machine.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
BODY_TOO_LARGE = f"the request body is over {MAX_BODY_BYTES} bytes"
# The only routes open without a key: liveness and readiness (a load balancer's probes).
OPEN_ROUTES = frozenset({"/healthz", "/readyz", "/health"})


class KeyCheckAndCount:
    """Every route but the health and readiness probes (and `/metrics` on this machine)
    needs a valid key when auth is on: the `/v1` routes, the API docs, vLLM's utility
    routes (`/tokenize`, `/version`, `/invocations`...), and a path no route answers. The
    key's user goes in `request.state.key_user`. Every response is counted by route and
    status. The Memory screen's page and sign-in routes pass without a key, and so do the
    admin routes once an admin password is set: the admin password guards them then
    (`server.access.admin`)."""

    def __init__(self, app: ASGIApp, auth: Auth, counters: HTTPCounters,
                 admin: AdminGate | None = None) -> None:
        self.app = app
        self.auth = auth
        self.counters = counters
        self.admin = admin
        # Replicas behind vllm-router (docs/serving/replicas.md): the header its
        # consistent_hash policy keys on. A client sends its own user's name there; one
        # naming another user is refused, so no client can place itself on another
        # user's replica or hold up their lease.
        route = os.environ.get("TANDEM_ROUTE_HEADER", "").strip().lower()
        self.route_header = route.encode() if route else None

    def _needs_key(self, path: str, peer: str | None) -> bool:
        if path in OPEN_ROUTES or (path == "/metrics" and is_loopback(peer)):
            return False
        if self.admin is not None and (is_screen_path(path) or (
                is_admin_path(path) and self.admin.password.is_set())):
            return False
        return True

    def _route_refusal(self, scope: Scope, user: str | None) -> APIError | None:
        if self.route_header is None or user is None:
            return None
        named = scope_header(scope, self.route_header)
        if named is None or named == user:
            return None
        header = self.route_header.decode()
        return APIError(400, f"the {header} header names another user than the key's: "
                        "send your own user's name or none", code="invalid_value",
                        param=header)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        refusal = _oversize(scope)
        if refusal is not None:
            self.counters.record("refused", refusal.status)
            await error_response(refusal, path)(scope, receive, send)
            return
        if wants_lift(scope, path):  # behind vllm-router: the key may be in the body
            try:
                receive = await lift(scope, receive)
            except BodyTooLarge as exc:
                self.counters.record("refused", 413)
                await error_response(APIError(413, str(exc), code="body_too_large"),
                                     path)(scope, receive, send)
                return
        peer = scope["client"][0] if scope.get("client") else None
        state = scope.setdefault("state", {})
        state["key_user"] = None
        if self._needs_key(path, peer):
            try:
                state["key_user"] = await self.auth.user_for(_authorization(scope, path),
                                                             peer)
            except APIError as exc:
                self.counters.record("unauthorized", exc.status)
                await error_response(exc, path)(scope, receive, send)
                return
            refusal = self._route_refusal(scope, state["key_user"])
            if refusal is not None:
                self.counters.record("refused", refusal.status)
                await error_response(refusal, path)(scope, receive, send)
                return
        status = 500  # what the client gets if the app fails before it answers
        received = 0

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        async def receive_counted() -> Message:
            # A body sent without a length (chunked) is counted as it comes. An HTTP
            # exception, so FastAPI's own body parsing passes it on as it is.
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    raise HTTPException(413, BODY_TOO_LARGE)
            return message

        try:
            await self.app(scope, receive_counted, send_counted)
        finally:
            route = scope.get("route")
            self.counters.record(getattr(route, "path", "unmatched"), status)


def _authorization(scope: Scope, path: str) -> str | None:
    """The request's `Authorization`; on the Messages API routes, Anthropic's `x-api-key`
    stands for it when it is absent (Claude Code sends its key so, with ANTHROPIC_API_KEY;
    with ANTHROPIC_AUTH_TOKEN it sends a bearer)."""
    authorization = scope_header(scope, b"authorization")
    if authorization is None and speaks_anthropic(path):
        key = scope_header(scope, b"x-api-key")
        return f"Bearer {key}" if key else None
    return authorization


def _oversize(scope: Scope) -> APIError | None:
    """A 413 for a declared body past the limit, a 431 for headers past theirs."""
    if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEADER_BYTES:
        return APIError(431, f"the request headers are over {MAX_HEADER_BYTES} bytes",
                        code="headers_too_large")
    length = scope_header(scope, b"content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        return APIError(413, BODY_TOO_LARGE, code="body_too_large")
    return None
