"""The memory routes' credentials in a JSON body, for clients behind vllm-router.

vllm-router 0.1.17 forwards a path it does not know (`/v1/memory/...`) with its method
and body but without its query string and without the client's headers, so a key in
`Authorization` and the session's `X-Tandem-Memory-Token` never reach the replica. A POST
to a memory route that sends no `Authorization` may carry them in its JSON body instead:
`api_key`, `memory_token` (and `project`, for `X-Tandem-Project`). They are lifted into
the request's headers before the key check, and the body goes on to the route as it came
(its models ignore these fields). A header the client did send always wins.
"""

from __future__ import annotations

import json

from starlette.types import Message, Receive, Scope

from server.http.asgi import scope_header

MEMORY_PREFIX = "/v1/memory"
# One memory call's body, a note (at most 8,000 characters, up to 6 bytes each once
# escaped in JSON) or a query, is far below this: a memory route's body read for its key,
# and a `/mcp` call's (server/mcp/http.py imports it), past it are refused with a 413.
MAX_MEMORY_BODY_BYTES = 256 * 1024
FIELDS = {"api_key": b"authorization", "memory_token": b"x-tandem-memory-token",
          "project": b"x-tandem-project"}


class BodyTooLarge(ValueError):
    """A memory route's body past MAX_MEMORY_BODY_BYTES (a 413)."""


def wants_lift(scope: Scope, path: str) -> bool:
    """A POST to a memory route with no `Authorization`: its body may hold the key."""
    return (scope["method"] == "POST" and (path == MEMORY_PREFIX
                                           or path.startswith(MEMORY_PREFIX + "/"))
            and scope_header(scope, b"authorization") is None)


async def lift(scope: Scope, receive: Receive) -> Receive:
    """Read the body, add the headers its credential fields stand for to `scope`, and
    return a receive that hands the app the same body."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left: pass that on
            return _replay([message], receive)
        body = message.get("body", b"")
        size += len(body)
        if size > MAX_MEMORY_BODY_BYTES:
            raise BodyTooLarge(f"a memory route's body is over {MAX_MEMORY_BODY_BYTES} bytes")
        chunks.append(body)
        if not message.get("more_body", False):
            break
    whole = b"".join(chunks)
    try:
        fields = json.loads(whole) if whole else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        # the route's own parsing answers it: a 422, or the 400 of a body nested past
        # the parser's depth (json.loads recurses, and would end in a 500 here)
        fields = None
    if isinstance(fields, dict):
        headers = list(scope["headers"])
        for field, header in FIELDS.items():
            value = fields.get(field)
            if isinstance(value, str) and value and scope_header(scope, header) is None \
                    and value.isascii() and value.isprintable():
                text = f"Bearer {value}" if header == b"authorization" else value
                headers.append((header, text.encode("ascii")))
        scope["headers"] = headers
    return _replay([{"type": "http.request", "body": whole, "more_body": False}], receive)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """The buffered messages first, then the client's channel (its disconnect)."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()
    return replayed
