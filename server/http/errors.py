"""OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}` with the right status;
on Anthropic's Messages API routes, Anthropic's shape (`{"type": "error", "error": {"type",
"message"}}`), whose `type` its clients read."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.backend import BackendFailed, EngineDead, RequestRejected
from server.http.asgi import route_path

# Anthropic's error types by status (its API's list); another 5xx is its `api_error`.
ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                         402: "billing_error", 403: "permission_error",
                         404: "not_found_error", 413: "request_too_large",
                         429: "rate_limit_error", 529: "overloaded_error"}


def speaks_anthropic(path: str) -> bool:
    """Whether `path` (as routed) is one of the Messages API's routes, which answer
    errors in Anthropic's shape and take Anthropic's `x-api-key`."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


class APIError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None,
                 param: str | None = None, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers  # a retryable refusal's Retry-After
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.kind = kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}

    def anthropic_body(self) -> dict:
        kind = ANTHROPIC_ERROR_TYPES.get(
            self.status, "api_error" if self.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": self.message}}


def error_response(error: APIError, path: str | None = None) -> JSONResponse:
    """The error as a response; in Anthropic's shape when `path` is a Messages API route."""
    body = error.anthropic_body() if path is not None and speaks_anthropic(path) \
        else error.body()
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return "request body is not valid JSON", None
    message = first.get("msg", "invalid request")
    return (f"{param}: {message}" if param else message), param


def engine_dead_error() -> APIError:
    return APIError(503, "the engine core process stopped; the server is exiting so that its "
                    "supervisor restarts it", code="engine_dead", kind="server_error")


def not_the_writer(reason: str, retry_after: float | None, holder: str | None) -> APIError:
    """Replicas: another replica writes this user's memory now (`lease_busy`), or this
    replica's lease went stale (`stale_lease`). A retryable **409** with `Retry-After`, not
    a 503: vllm-router retries a 503 five times and counts each as the replica failing, so
    two refusals of one user's write opened its circuit breaker and took the replica out
    for every user for a minute. The SDKs (OpenAI's, Anthropic's) retry a 409 themselves,
    honouring `Retry-After`."""
    return APIError(409, f"another replica writes this user's memory now: {reason}; retry",
                    code=reason, kind="conflict_error",
                    headers={"Retry-After": str(max(1, math.ceil(retry_after or 1))),
                             **({"X-Tandem-Writer": holder} if holder else {})})


def backend_error(exc: BackendFailed) -> APIError:
    """Proxy mode: the backend lost the request; nothing of it was recorded."""
    return APIError(exc.status, f"the backend failed: {exc.reason}",
                    code="backend_timeout" if exc.status == 504 else "backend_error",
                    kind="server_error")


def install_error_handlers(app: FastAPI) -> None:
    def answer(request: Request, error: APIError) -> JSONResponse:
        return error_response(error, route_path(request.scope))

    @app.exception_handler(EngineDead)
    async def _engine_dead(request: Request, _exc: EngineDead) -> JSONResponse:
        return answer(request, engine_dead_error())

    @app.exception_handler(BackendFailed)
    async def _backend(request: Request, exc: BackendFailed) -> JSONResponse:
        return answer(request, backend_error(exc))

    @app.exception_handler(RequestRejected)
    async def _rejected(request: Request, exc: RequestRejected) -> JSONResponse:
        return answer(request, APIError(400, "the engine refused the request: "
                                        f"{_without_source_places(str(exc))}",
                                        code="invalid_value"))

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return answer(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return answer(request, APIError(400, message, code="invalid_value", param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 413: "body_too_large"}.get(exc.status_code)
        return answer(request, APIError(exc.status_code, str(exc.detail), code=code))

    @app.exception_handler(UnicodeEncodeError)
    async def _not_text(request: Request, _exc: UnicodeEncodeError) -> JSONResponse:
        # A route whose body FastAPI parses: a lone surrogate reached a file or a hash.
        return answer(request, _lone_surrogate())

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, _exc: Exception) -> JSONResponse:
        # A bug: still an error body in the route's dialect (an SDK reads Anthropic's on the
        # Messages routes), never Starlette's plain text; the traceback goes to the log as
        # before (Starlette raises it on after this answer).
        return answer(request, APIError(500, "the server failed on this request (its log "
                                        "says where)", code="internal_error",
                                        kind="server_error"))

    @app.exception_handler(json.JSONDecodeError)
    async def _bad_json(request: Request, _exc: json.JSONDecodeError) -> JSONResponse:
        return answer(request, APIError(400, "request body is not valid JSON",
                                        code="invalid_json"))


# xgrammar's C++ errors open with the time and the source file and line that raised them
# ("[02:31:31] /project/cpp/json_schema_converter.cc:4950: "): nothing a client can use
_SOURCE_PLACE = re.compile(r"\[\d\d:\d\d:\d\d\] \S+\.(?:cc|cpp|cxx|h|hpp):\d+: ")


def _without_source_places(message: str) -> str:
    return _SOURCE_PLACE.sub("", message)


def validation_error(exc) -> APIError:
    """A request body's pydantic ValidationError as a 400 naming the field."""
    first = exc.errors()[0]
    param = ".".join(str(p) for p in first.get("loc", ())) or None
    if first.get("type") == "unsupported":  # the message names the field already
        return APIError(400, str(first.get("msg")), code="unsupported_parameter",
                        param=(first.get("ctx") or {}).get("name"))
    if first.get("type") == "extra_forbidden":
        return APIError(400, f"{param}: not a request field this server takes (docs/serving/"
                        "openai.md lists them)", code="unknown_parameter", param=param)
    message = f"{param}: {first.get('msg')}" if param else str(first.get("msg"))
    if first.get("type") in BOUND_ERRORS:  # vLLM's clients match on pydantic's type name
        message += f" ({first['type']})"
    return APIError(400, message, code="invalid_value", param=param)


BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


# A body this small is parsed on the event loop (well under a millisecond); a larger one in
# a worker thread, so that one big request does not hold up every other client.
SMALL_BODY = 64 * 1024

BodyCheck = Callable[[Any], None]  # raises APIError when a parsed body is past a limit


async def validated_body(request: Request, model, check: BodyCheck | None = None):
    """The request's JSON body as `model` (a pydantic model class); a 400 naming the
    field when it is not one. `check` sees the parsed JSON before the model does (a
    route's size limits: `server.http.body_limits`)."""
    raw = await request.body()
    if len(raw) <= SMALL_BODY:
        return _validated(raw, model, check)
    return await asyncio.to_thread(_validated, raw, model, check)


async def json_body(request: Request, check: BodyCheck | None = None) -> dict:
    """The request's body as a JSON object; a 400 when it is not one."""
    raw = await request.body()
    if len(raw) <= SMALL_BODY:
        return _parsed(raw, check)
    return await asyncio.to_thread(_parsed, raw, check)


def _validated(raw: bytes, model, check: BodyCheck | None):
    body = _parsed(raw, check)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _parsed(raw: bytes, check: BodyCheck | None) -> dict:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # nested past the parser's depth: not a request
        raise APIError(400, "request body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, "request body must be a JSON object", code="invalid_json")
    if check is not None:
        check(body)
    if _SURROGATE_ESCAPE.search(raw) and not _is_text(body):
        raise _lone_surrogate()
    return body


# JSON may spell a UTF-16 surrogate as an escape; a pair is one character, a lone one is
# not text (no file, hash or tokenizer takes it). Raw UTF-8 cannot hold one, so only a body
# with such an escape is checked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _is_text(body: dict) -> bool:
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        return False
    return True


def _lone_surrogate() -> APIError:
    return APIError(400, "the request holds a lone UTF-16 surrogate (an escape from \\ud800 "
                    "to \\udfff without its pair): not text", code="invalid_text")
