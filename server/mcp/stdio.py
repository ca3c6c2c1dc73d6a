"""`tandem mcp`: the memory tools over stdio, for a client that spawns the server.

The same memory folder and user as `tandem serve`. One process writes a folder's search
index at a time, so each call looks for a running server first
(`$TANDEM_HOME/server.json`, `server.mcp.discovery`): when one runs, the call is sent to
its `/mcp` endpoint with the SDK's own client (`$TANDEM_API_KEY` as the key, when set)
and its answer passed back as it is; when none runs, the call is served here, on the
folder itself. A server that starts or stops between two calls is noticed at the next.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from server.mcp import discovery
from server.mcp.access import LocalMemory
from server.mcp.catalog import build_server
from server.mcp.http import PATH
from server.mcp.tools import Caller
from server.turn.memory import PROJECT_HEADER

log = logging.getLogger("tandem.mcp")

FORWARDED = frozenset({"tools/call", "resources/read"})
CONNECT_S, CALL_S = 10.0, 120.0


class Forwarder:
    """MCP middleware: a call goes to the running server when there is one."""

    def __init__(self, home: Path, caller: Caller, user_given: bool,
                 api_key: str | None) -> None:
        self.home = home
        self.caller = caller
        self.user_given = user_given
        self.api_key = api_key

    async def __call__(self, ctx: Any, call_next: Callable) -> Any:
        if ctx.method not in FORWARDED:
            return await call_next(ctx)
        server = discovery.running(self.home)
        if server is None:
            return await call_next(ctx)
        problem = self._mismatch(server)
        if problem is None:
            try:
                return await self._forward(server, ctx.method, dict(ctx.params or {}))
            except MCPError:
                raise  # the server's own protocol error, passed on as it is
            except Exception as exc:  # noqa: BLE001 (said to the model, in words)
                problem = _unreachable(server, exc)
        if ctx.method == "tools/call":
            return CallToolResult(content=[TextContent(type="text", text=problem)],
                                  is_error=True)
        raise MCPError(-32603, problem)

    def _mismatch(self, server: discovery.RunningServer) -> str | None:
        """A `--user` the server would not serve this client as (without a key, a client
        is the server's own user)."""
        if self.api_key or not self.user_given or self.caller.user == server.user:
            return None
        return (f"a Tandem server runs on this memory folder ({server.url}) and serves a "
                f"client without a key as {server.user!r}, not {self.caller.user!r}: set "
                f"TANDEM_API_KEY to {self.caller.user!r}'s key (tandem keys add), or leave "
                "out --user")

    async def _forward(self, server: discovery.RunningServer, method: str,
                       params: dict[str, Any]) -> Any:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if self.caller.project:
            headers[PROJECT_HEADER] = self.caller.project
        transport = httpx2.AsyncHTTPTransport(uds=server.uds) if server.uds else None
        timeout = httpx2.Timeout(CONNECT_S, read=CALL_S)
        async with httpx2.AsyncClient(headers=headers, transport=transport,
                                      timeout=timeout) as http, \
                streamable_http_client(server.url + PATH, http_client=http) as streams, \
                ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            if method == "tools/call":
                return await session.call_tool(params.get("name", ""),
                                               params.get("arguments") or {})
            return await session.read_resource(params.get("uri", ""))


def _unreachable(server: discovery.RunningServer, exc: BaseException) -> str:
    status = _status_of(exc)
    if status == 401:
        return (f"the Tandem server at {server.url} needs an API key: set TANDEM_API_KEY "
                "in this MCP server's environment")
    said = f"it answered {status}" if status else type(exc).__name__
    log.warning("a call to the server at %s failed: %s", server.url, said)
    return (f"the Tandem server at {server.url} did not take this call ({said}); try again "
            "in a moment")


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status inside `exc` (the SDK's task groups wrap it in exception groups)."""
    if isinstance(exc, httpx2.HTTPStatusError):
        return exc.response.status_code
    for inner in getattr(exc, "exceptions", ()) or ():
        if (found := _status_of(inner)) is not None:
            return found
    cause = exc.__cause__ or exc.__context__
    return _status_of(cause) if cause is not None and cause is not exc else None


def run_stdio(home: Path, user: str, project: str | None, user_given: bool,
              api_key: str | None) -> int:
    """Serve the tools on stdin and stdout until the client closes them."""
    from conductor.memory.types import default_embedder

    caller = Caller(user, project)
    server = build_server(LocalMemory(home, default_embedder), lambda: caller)
    server.middleware.append(Forwarder(home, caller, user_given, api_key))
    anyio.run(server.run_stdio_async)
    return 0
