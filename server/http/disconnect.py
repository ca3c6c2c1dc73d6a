"""A whole (non-streamed) answer ends when its client goes away, as vLLM's server ends it.

Starlette cancels a streamed response's generator when the client disconnects, but a route
that builds one JSON object is never told: its generation ran to `max_tokens` for no one,
holding an engine slot. `unless_disconnected` runs the answer beside a watch on the
connection (vLLM's `with_cancellation` does the same) and cancels it when the client
leaves, so the engine aborts the request and the turn records what was generated
(`Answer.stopped`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

T = TypeVar("T")

# nginx's "client closed request": nobody reads it, the access log shows it.
CLIENT_CLOSED = 499


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone. Only after the route read the body: until then
    `receive` gives the body's chunks, which this would swallow."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, answer: Awaitable[T]) -> T | Response:
    """`answer`'s result; a 499 with no body if the client went away first (the answer's
    task cancelled and waited for, so its engine request is aborted before this returns)."""
    work = asyncio.ensure_future(answer)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:  # on the client's leaving, or this route's own cancelling (a shutdown)
        watch.cancel()
        work.cancel()  # nothing once it is done
        await asyncio.wait((work, watch))
    if work.cancelled():
        return Response(status_code=CLIENT_CLOSED)
    return work.result()


class QuietDisconnects:
    """A client that leaves before its body is read whole is gone, not a server fault:
    Starlette raises ClientDisconnect from the route's read, which became a 500 and a
    traceback in the log, one a closed socket (a key holder could fill the log so). Here
    it ends the request quietly; the access log, outside, shows it as the client gone."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            return
