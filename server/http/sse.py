"""Server-sent event streams: started before the route answers, ended with an error event
if the engine dies mid-stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TypeVar

from engine.backend import EngineDead
from server.http.errors import engine_dead_error

T = TypeVar("T")


async def prepended(first: T | None, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    """`first` (unless None), then the rest."""
    if first is not None:
        yield first
    async for item in rest:
        yield item


async def events_or_error(events: AsyncIterator[str]) -> AsyncIterator[str]:
    """A stream's events; an engine that dies mid-stream ends it with an error event and
    `[DONE]` (vLLM's way) rather than a connection cut without a word."""
    try:
        async for event in events:
            yield event
    except EngineDead:
        yield f"data: {json.dumps(engine_dead_error().body())}\n\n"
        yield "data: [DONE]\n\n"


async def started(events: AsyncIterator[str]) -> AsyncIterator[str]:
    """The stream, with its first event already produced: a stream's first event waits for
    the engine's first delta, so the route that awaits this answers only once the engine
    has the request, and requests reach the engine in their arrival order, streamed or
    not. Errors before the first event are the route's own (a 4xx, not a broken stream)."""
    guarded = events_or_error(events)
    return prepended(await anext(guarded), guarded)
