"""`/mcp` on `tandem serve`: the memory tools over MCP's streamable HTTP transport.

The SDK's ASGI app is a route of the FastAPI app itself, so every middleware of `/v1`
applies to it unchanged: the browser guard (Host 421, Origin 403, JSON bodies only 415),
the API key check (401; the key's user is the caller, as on every route) and the request
counts. The SDK's own Host/Origin check is off: the browser guard is the one rule, with
the operator's `--allowed-host` and `--allowed-origin`.

Stateless and JSON (no MCP session, no event stream): each POST carries one call and is
answered with one JSON body, so the user is the key's of the very request that asks,
and a server restart breaks no client. So POST is the one method: a GET (the SDK would
open an event stream that nothing ever writes to and that never ends) or a DELETE (a
session's end, and there are none) is a 405 that says so.

`X-Tandem-Memory` means what it means on the chat routes: `read` or `off` and the write
tools refuse (a tool error, nothing written) while the reads answer; any other value is
a 400, as there.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.access.body_credentials import MAX_MEMORY_BODY_BYTES
from server.http.errors import APIError, error_response
from server.mcp.access import ServedMemory
from server.mcp.catalog import build_server
from server.mcp.tools import Caller
from server.turn.memory import MEMORY_HEADER, PROJECT_HEADER, memory_switch, request_user

if TYPE_CHECKING:
    from fastapi import FastAPI

    from conductor.memory.interface import MemoryDoor
    from server.idle.search import SearchService

PATH = "/mcp"
# One call's body past this is refused with 413 before it is parsed: the memory routes'
# own cap, for the same note or query (the name is /mcp's, for what its docs state).
MAX_BODY_BYTES = MAX_MEMORY_BODY_BYTES

# The call's caller, set by the middleware below for the tools it runs (a frozen value).
_CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar(
    "mcp_caller", default=Caller(None))  # noqa: B039


def mount_mcp(app: FastAPI, services: MemoryDoor,
              search_service: Callable[[], SearchService | None]) -> None:
    """Serve the memory tools at `/mcp` inside `app`, for the users its keys name."""
    server = build_server(ServedMemory(services, search_service), _CALLER.get)

    def caller_of(request: Request) -> str | None:
        """The call's user: its key's (key_check put it in the request's state) or a
        trusted proxy's relay; APIError (400) for a relayed name that can be no one's."""
        peer = request.client.host if request.client else None
        return request_user(request.headers, peer, services.settings,
                            getattr(request.state, "key_user", None))

    async def name_the_caller(ctx: Any, call_next: Any) -> Any:
        # The HTTP request that carries this call: its key's user (key_check put it in
        # the request's state) or a trusted proxy's relay, and its project header.
        request = ctx.request
        if request is None:
            return await call_next(ctx)
        user = caller_of(request)  # PostOnly refused a name that can be no one's
        token = _CALLER.set(Caller(user, request.headers.get(PROJECT_HEADER) or None,
                                   memory_switch(request.headers.get(MEMORY_HEADER))))
        try:
            return await call_next(ctx)
        finally:
            _CALLER.reset(token)

    server.middleware.append(name_the_caller)
    starlette = server.streamable_http_app(
        streamable_http_path=PATH, stateless_http=True, json_response=True,
        max_request_body_size=MAX_BODY_BYTES,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    app.router.routes.extend(_gated(route, caller_of) for route in starlette.routes)

    # The SDK's session manager runs for the app's life (its task group serves the calls).
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(target: Any):
        async with server.session_manager.run(), inner(target) as state:
            yield state

    app.router.lifespan_context = lifespan



async def _whole_body(receive: Receive) -> bytes | None:
    """The request's body, or None when the client left before it was whole; read no
    further than one byte past MAX_BODY_BYTES (the SDK's 413 says so)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES or not message.get("more_body", False):
            return b"".join(chunks)[:MAX_BODY_BYTES + 1]


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` with the body given back first, whole, then the connection's own."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _gated(route: Any, caller_of: Callable[[Request], str | None]) -> Any:
    """The SDK's `/mcp` route behind `PostOnly`; any other route of its app as it is."""
    if isinstance(route, Route) and route.path == PATH:
        return Route(PATH, endpoint=PostOnly(route.app, caller_of))
    return route


class PostOnly:
    """`/mcp`'s methods and headers checked before the SDK sees the request: POST only
    (405 with `Allow: POST` otherwise), an X-Tandem-Memory it knows and a caller who can
    be someone (400 otherwise: a relayed X-Tandem-User that can be no folder, refused as
    on the chat routes rather than failing inside the SDK). Behind the app's middleware,
    so the key and browser checks come first."""

    def __init__(self, app: ASGIApp, caller_of: Callable[[Request], str | None]) -> None:
        self.app = app
        self.caller_of = caller_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = self._refusal(scope)
        if error is None and scope["type"] == "http":
            try:
                self.caller_of(Request(scope))
            except APIError as exc:
                error = exc
        if error is None and scope["type"] == "http":
            # read whole here: the SDK answers a client gone mid-body with a 500 and a
            # traceback in the log, one a closed socket
            body = await _whole_body(receive)
            if body is not None:
                await self.app(scope, _replaying(body, receive), send)
            return
        if error is None:
            await self.app(scope, receive, send)
            return
        await error_response(error)(scope, receive, send)

    @staticmethod
    def _refusal(scope: Scope) -> APIError | None:
        if scope["type"] != "http":
            return None
        if scope["method"] != "POST":
            return APIError(405, f"{PATH} takes POST only: it answers each call with one "
                            "JSON body and keeps no session or event stream to GET or "
                            f"DELETE (not {scope['method']})", code="method_not_allowed",
                            headers={"Allow": "POST"})
        try:
            memory_switch(Request(scope).headers.get(MEMORY_HEADER))
        except APIError as exc:
            return exc
        return None
