"""The access log: a line a request, in the form uvicorn (and so vLLM's server) writes,

    INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK 0.842s
              prompt_tokens=412 cached_tokens=384 completion_tokens=23   (on one line)

with the time the request took and, where the engine generated for it, its tokens. Its
own ASGI middleware, outermost: a request the browser guard, the key check or a size limit
refuses (421, 403, 415, 401, 413, 431) leaves its line too, so a user reads in the
server's log why a client failed. A line holds the client's address, the method, the
path (a route's template where its path holds a value, a note's id say; never the query
string, which can carry a key), the status and the figures: never a header or a body.

The tokens are the engine's own, summed over the request's generations (a memory tool
answered inside the turn, or `n` choices, are several): each finished client generation
is counted to the request whose task ran it, through a context variable the middleware
sets (a task the request starts inherits it; the idle loop's background turns do not).
"""

from __future__ import annotations

import http
import logging
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass
from urllib.parse import quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.stats import RequestTimings
from server.http.asgi import route_path

ACCESS_LOG = logging.getLogger("tandem.access")
MAX_PATH_CHARS = 256  # a path a client made up is cut there: a line stays a line


@dataclass
class RequestTokens:
    """The engine's tokens for one HTTP request so far."""

    prompt: int = 0
    cached: int = 0
    completion: int = 0
    generations: int = 0


_request_tokens: ContextVar[RequestTokens | None] = ContextVar("tandem_request_tokens",
                                                               default=None)


def count_generation(timings: RequestTimings) -> None:
    """An observer of the engine's finished requests (`EngineStats.observers`): a client
    generation's tokens, counted to the HTTP request it ran for."""
    tokens = _request_tokens.get()
    if tokens is None or timings.kind != "client":
        return
    tokens.prompt += timings.prompt_tokens
    tokens.cached += timings.cached_tokens
    tokens.completion += timings.output_tokens
    tokens.generations += 1


def configure(enabled: bool) -> None:
    """`tandem serve`'s access log: on stdout as uvicorn writes its own (which stays off:
    it would log query strings), or off (`--disable-uvicorn-access-log`)."""
    from uvicorn.logging import DefaultFormatter

    ACCESS_LOG.handlers.clear()
    ACCESS_LOG.propagate = False
    if not enabled:
        ACCESS_LOG.setLevel(logging.WARNING)  # the middleware then does no work at all
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s", use_colors=None))
    ACCESS_LOG.addHandler(handler)
    ACCESS_LOG.setLevel(logging.INFO)


class AccessLog:
    """Times each request, sees its status and writes its line when the answer is done
    (a stream's when its last chunk is sent)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not ACCESS_LOG.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None
        failed = False

        async def send_seen(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        tokens = RequestTokens()
        reset = _request_tokens.set(tokens)
        try:
            await self.app(scope, receive, send_seen)
        except Exception:
            failed = True  # the server's error middleware, outside, answers 500
            raise
        finally:
            _request_tokens.reset(reset)
            if status is None and failed:
                status = 500
            ACCESS_LOG.info(access_line(scope, status, time.perf_counter() - started,
                                        tokens))


def access_line(scope: Scope, status: int | None, seconds: float,
                tokens: RequestTokens) -> str:
    """The line after uvicorn's level prefix. `status` None: the client left before any
    answer started."""
    client = scope.get("client")
    peer = f"{client[0]}:{client[1]}" if client and client[0] else "-"
    try:
        phrase = http.HTTPStatus(status).phrase if status is not None else "(client gone)"
    except ValueError:
        phrase = ""
    line = (f'{peer} - "{scope.get("method", "-")} {_logged_path(scope)} '
            f'HTTP/{scope.get("http_version", "1.1")}" {status or "-"} {phrase} '
            f"{seconds:.3f}s")
    if tokens.generations:
        line += (f" prompt_tokens={tokens.prompt} cached_tokens={tokens.cached} "
                 f"completion_tokens={tokens.completion}")
        if tokens.generations > 1:
            line += f" generations={tokens.generations}"
    return line


def _logged_path(scope: Scope) -> str:
    """The request's path without its query string; a matched route whose path holds
    values (`/v1/conductor/notes/{note_id}`) as its template; characters that could break
    the line percent-encoded."""
    path: str = scope.get("path", "")
    route = getattr(scope.get("route"), "path", None)
    if route and "{" in route:
        routed = route_path(scope)
        path = path[:len(path) - len(routed)] + route  # the root path kept, if it came so
    if len(path) > MAX_PATH_CHARS:
        path = path[:MAX_PATH_CHARS] + "..."
    return quote(path, safe="/{}:@!$&'()*+,;=%")
