"""Server-sent event streams: started before the route answers, ended with an error event
if the engine dies mid-stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TypeVar

from engine.backend import BackendFailed, EngineDead
from server.http.errors import backend_error, engine_dead_error

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
    except BackendFailed as exc:  # proxy mode: the backend cut the stream or failed it
        yield f"data: {json.dumps(backend_error(exc).body())}\n\n"
        yield "data: [DONE]\n\n"


async def started(events: AsyncIterator[str]) -> AsyncIterator[str]:
    """The stream, with its first event already produced: a stream's first event waits for
    the engine's first delta, so the route that awaits this answers only once the engine
    has the request, and requests reach the engine in their arrival order, streamed or
    not. Errors before the first event are the route's own (a 4xx, or proxy mode's 502
    for a backend that failed the request, not a broken stream); an engine that died
    then still ends a stream with its error event, as vLLM's does."""
    try:
        first = await anext(events)
    except EngineDead:
        return _error_events(engine_dead_error().body())
    return events_or_error(prepended(first, events))


async def _error_events(body: dict) -> AsyncIterator[str]:
    yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"
