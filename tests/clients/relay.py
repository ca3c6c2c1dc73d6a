"""A recording relay between a client and the server: each request's body and the answer's
usage, bytes passed on unchanged (the server logs no bodies, and the lane must see that a
tool's result reached the model). It rewrites nothing: a client talks to it as to the
server."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


@dataclass
class Exchange:
    """One request as the client sent it, and what came back."""

    method: str
    path: str
    body: dict[str, Any]
    status: int = 0
    answer: str = ""

    def events(self) -> list[dict[str, Any]]:
        """The answer's JSON: the object, or a stream's events in order."""
        lines = [line.removeprefix("data: ") for line in self.answer.splitlines()
                 if line.startswith("data: {")]
        out = []
        for text in lines or [self.answer]:
            try:
                out.append(json.loads(text))
            except ValueError:
                pass
        return [one for one in out if isinstance(one, dict)]

    def tokens(self) -> tuple[int, int] | None:
        """(the prompt's tokens, how many the cache served), from the answer's usage in
        its API's terms: chat's, the Responses API's or Anthropic's."""
        found = None
        for event in self.events():
            usage = (event.get("response") or event.get("message") or event).get("usage") \
                or event.get("usage")
            if not isinstance(usage, dict):
                continue
            if "prompt_tokens" in usage:  # chat
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                found = (usage["prompt_tokens"], cached)
            elif "input_tokens_details" in usage:  # Responses
                found = (usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"])
            elif "cache_read_input_tokens" in usage:  # Anthropic: input_tokens is the rest
                cached = usage["cache_read_input_tokens"] or 0
                found = (usage["input_tokens"] + cached
                         + (usage.get("cache_creation_input_tokens") or 0), cached)
        return found


@dataclass
class Relay:
    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)
    port: int = 0

    def start(self) -> None:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        if not ready.wait(30):
            raise RuntimeError("the relay did not start")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()
        self._loop.run_forever()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        seen = Exchange(request.method, request.path_qs, body)
        self.exchanges.append(seen)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        async with ClientSession(timeout=ClientTimeout(total=600)) as session, \
                session.request(request.method, self.upstream + request.path_qs, data=raw,
                                headers=headers) as upstream:
            seen.status = upstream.status
            answer = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() == "content-type"})
            await answer.prepare(request)
            received = b""
            async for chunk in upstream.content.iter_any():
                received += chunk
                # kept before the client has it: a client may exit the moment it does
                seen.answer = received.decode(errors="replace")
                await answer.write(chunk)
            await answer.write_eof()
        return answer
