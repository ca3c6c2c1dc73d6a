"""vLLM's utility routes, with vLLM's answers, for clients and tools written against it.

* `POST /tokenize`, `POST /detokenize`, `GET /tokenizer_info`: `server/routes/tokenization.py`;
* `GET /version`: `{"version": vLLM's version, "tandem": Tandem's}`;
* `GET /health`: 200 (no body) while the engine serves, else 503 (loading, failed, dead);
* `GET /load`: `{"server_load": N}`, the generation requests in flight
  (`server/http/load_tracking.py`);
* `POST /invocations` (SageMaker's): a chat completion when the body has `messages`, a
  completion when it has `prompt`, answered by those routes' own handlers.

All but `/health` need the key when the server has one (`server/access/key_check.py`).
"""

from __future__ import annotations

import asyncio
import functools
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.types import Message, Receive, Scope, Send

from server.http.body_limits import body_limits
from server.http.errors import APIError, json_body
from server.http.load_tracking import ServerLoad
from server.routes import tokenization

CHAT_ROUTE = "/v1/chat/completions"
COMPLETIONS_ROUTE = "/v1/completions"


@functools.cache
def versions() -> dict[str, str]:
    """vLLM's version (the engine's), as vLLM's `/version` has it, and Tandem's."""
    from vllm.version import __version__ as vllm_version

    try:
        tandem = version("tandem")
    except PackageNotFoundError:  # run from a checkout that was never installed
        tandem = "unknown"
    return {"version": vllm_version, "tandem": tandem}


class _AnsweredBy(Response):
    """The answer of another route's handler to this request: its body validation, its
    errors and its streaming run as they would at its own path."""

    def __init__(self, route: APIRoute, body: bytes) -> None:
        super().__init__()
        self.route = route
        self.body_bytes = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        replayed = False

        async def receive_again() -> Message:
            # The body this route already read, then what the client sends next (a
            # disconnect, which a stream watches for).
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": self.body_bytes, "more_body": False}
            return await receive()

        await self.route.handle(dict(scope), receive_again, send)


def _post_route(app: FastAPI, path: str) -> APIRoute:
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.path == path and "POST" in route.methods:
            return route
    raise LookupError(f"no POST {path} route")  # the app always has both


def vllm_router(state, load: ServerLoad) -> APIRouter:
    """`state`: the app's ServerState (the engine, once loaded); `load`: the counter the
    load-tracking middleware keeps."""
    router = APIRouter()

    @router.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        engine = state.ready_engine()
        body = await json_body(request, body_limits(engine))
        # rendering, tokenizing and the answer's JSON cost in proportion: off the loop
        return await asyncio.to_thread(_json_answer, tokenization.tokenize, engine, body)

    @router.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        engine = state.ready_engine()
        body = await json_body(request, body_limits(engine))
        return await asyncio.to_thread(_json_answer, tokenization.detokenize, engine, body)

    @router.get("/tokenizer_info")
    async def tokenizer_info() -> JSONResponse:
        return JSONResponse(tokenization.tokenizer_info(state.ready_engine()))

    @router.get("/version")
    async def show_version() -> JSONResponse:
        return JSONResponse(versions())

    @router.get("/health")
    async def health() -> Response:
        state.ready_engine()  # a 503 naming why: still loading, failed to load, or dead
        return Response(status_code=200)

    @router.get("/load")
    async def server_load() -> JSONResponse:
        return JSONResponse({"server_load": load.in_flight})

    @router.post("/invocations")
    async def invocations(request: Request) -> Response:
        body = await json_body(request)  # the route it goes to checks its limits
        if "messages" in body:
            path = CHAT_ROUTE
        elif "prompt" in body:
            path = COMPLETIONS_ROUTE
        else:
            raise APIError(400, "cannot find a suitable handler for the request: a chat "
                           "completion has 'messages', a completion has 'prompt'",
                           code="invalid_value")
        return _AnsweredBy(_post_route(request.app, path), await request.body())

    return router


def _json_answer(answer, engine, body: dict) -> Response:
    """`answer(engine, body)` as a JSON response (run in a worker thread)."""
    return JSONResponse(answer(engine, body))
