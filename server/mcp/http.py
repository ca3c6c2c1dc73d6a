"""`/mcp` on `tandem serve`: the memory tools over MCP's streamable HTTP transport.

The SDK's ASGI app is a route of the FastAPI app itself, so every middleware of `/v1`
applies to it unchanged: the browser guard (Host 421, Origin 403, JSON bodies only 415),
the API key check (401; the key's user is the caller, as on every route) and the request
counts. The SDK's own Host/Origin check is off: the browser guard is the one rule, with
the operator's `--allowed-host` and `--allowed-origin`.

Stateless and JSON (no MCP session, no event stream): each POST carries one call and is
answered with one JSON body, so the user is the key's of the very request that asks,
and a server restart breaks no client.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp.server.transport_security import TransportSecuritySettings

from server.mcp.access import ServedMemory
from server.mcp.catalog import build_server
from server.mcp.tools import Caller
from server.turn.memory import PROJECT_HEADER, request_user

if TYPE_CHECKING:
    from fastapi import FastAPI

    from conductor.memory.services import MemoryServices
    from server.idle.search import SearchService

PATH = "/mcp"
# One call's body: a note is at most 8,000 characters (up to 6 bytes each once escaped in
# JSON); a body past this is refused with 413 before it is parsed.
MAX_BODY_BYTES = 256 * 1024

# The call's caller, set by the middleware below for the tools it runs (a frozen value).
_CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar(
    "mcp_caller", default=Caller(None))  # noqa: B039


def mount_mcp(app: FastAPI, services: MemoryServices,
              search_service: Callable[[], SearchService | None]) -> None:
    """Serve the memory tools at `/mcp` inside `app`, for the users its keys name."""
    server = build_server(ServedMemory(services, search_service), _CALLER.get)

    async def name_the_caller(ctx: Any, call_next: Any) -> Any:
        # The HTTP request that carries this call: its key's user (key_check put it in
        # the request's state) or a trusted proxy's relay, and its project header.
        request = ctx.request
        if request is None:
            return await call_next(ctx)
        peer = request.client.host if request.client else None
        user = request_user(request.headers, peer, services.settings,
                            getattr(request.state, "key_user", None))
        token = _CALLER.set(Caller(user, request.headers.get(PROJECT_HEADER) or None))
        try:
            return await call_next(ctx)
        finally:
            _CALLER.reset(token)

    server.middleware.append(name_the_caller)
    starlette = server.streamable_http_app(
        streamable_http_path=PATH, stateless_http=True, json_response=True,
        max_request_body_size=MAX_BODY_BYTES,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    app.router.routes.extend(starlette.routes)

    # The SDK's session manager runs for the app's life (its task group serves the calls).
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(target: Any):
        async with server.session_manager.run(), inner(target) as state:
            yield state

    app.router.lifespan_context = lifespan
