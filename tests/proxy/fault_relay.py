"""A relay in front of a real backend that fails its completions on demand, as a backend
does when it breaks: a 5xx, a stream cut mid-answer, a stream that stalls, an error event
mid-stream. Everything else is relayed as the backend answers it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

FAULTS = ("status_500", "cut", "stall", "error_event")


class RelayCut(Exception):
    """Raised inside a streamed body: uvicorn drops the connection mid-message."""


class FaultRelay:
    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.fault: str | None = None
        self.after_events = 4  # a cut or an error event comes after this many events
        self.stall_s = 30.0
        self.completions = 0  # completions requests that reached the relay
        self.app = Starlette(routes=[
            Route("/readyz", lambda _r: JSONResponse({"status": "ready"})),
            Route("/health", self._relay_get), Route("/v1/models", self._relay_get),
            Route("/metrics", self._relay_get),
            Route("/v1/completions", self._completions, methods=["POST"]),
        ])

    async def _relay_get(self, request: Request) -> Response:
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{self.target}{request.url.path}", timeout=30)
        return Response(answer.content, answer.status_code,
                        media_type=answer.headers.get("content-type"))

    async def _completions(self, request: Request) -> Response:
        self.completions += 1
        body = await request.json()
        if self.fault == "status_500":
            return JSONResponse({"error": {"message": "out of memory (injected)",
                                           "type": "InternalServerError", "code": 500}}, 500)
        return StreamingResponse(self._events(body), media_type="text/event-stream")

    async def _events(self, body: dict) -> AsyncIterator[bytes]:
        if self.fault == "stall":
            await asyncio.sleep(self.stall_s)
        sent = 0
        async with httpx.AsyncClient(timeout=120) as client, \
                client.stream("POST", f"{self.target}/v1/completions", json=body) as answer:
            async for line in answer.aiter_lines():
                if line.startswith("data:") and sent >= self.after_events:
                    if self.fault == "cut":
                        raise RelayCut("the relay drops the connection")
                    if self.fault == "error_event":
                        yield (b'data: {"error": {"message": "the engine failed (injected)", '
                               b'"type": "InternalServerError", "code": 500}}\n\n')
                        return
                if line.startswith("data:"):
                    sent += 1
                yield f"{line}\n".encode()
