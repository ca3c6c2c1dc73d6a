"""Server-sent event streams: each event framed here, once for every route; a stream
started before the route answers, ended with an error event if the engine dies
mid-stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, TypeVar

from fastapi.responses import StreamingResponse

from engine.backend import BackendFailed, EngineDead
from server.http.errors import APIError, backend_error, engine_dead_error

T = TypeVar("T")


def frame(data: dict[str, Any] | str, event: str | None = None) -> str:
    """One server-sent event: `data: <JSON>` (a string as it is: `[DONE]`), after
    `event: <name>` in the streams that name their events (Anthropic's Messages, the
    Responses API's)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = "" if event is None else f"event: {event}\n"
    return f"{head}data: {payload}\n\n"


DONE = frame("[DONE]")  # the end of an OpenAI-style stream (chat, completions)


def event_stream(events: AsyncIterator[str], headers: dict[str, str] | None = None
                 ) -> StreamingResponse:
    """The framed events as the route's answer, never cached."""
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", **(headers or {})})


def stream_error(exc: EngineDead | BackendFailed) -> APIError:
    """What a stream that failed mid-way tells its client: the engine died, or (proxy
    mode) the backend cut the stream or failed it."""
    return engine_dead_error() if isinstance(exc, EngineDead) else backend_error(exc)


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
    except (EngineDead, BackendFailed) as exc:
        yield frame(stream_error(exc).body())
        yield DONE


async def typed_events(events: AsyncIterator[dict[str, Any]],
                       error_event: Callable[[APIError], dict[str, Any]],
                       numbered: bool = False,
                       large: Callable[[dict[str, Any]], bool] = lambda _event: False
                       ) -> AsyncIterator[str]:
    """A dialect's events, each named by its `type` (`event: <type>`), `numbered` with a
    `sequence_number` where the API has one; an engine or a backend that fails mid-stream
    ends the stream with `error_event` of its error. A backend that fails before the first
    event is the route's error (a 502, as on the chat route: see `started`). A `large`
    event is framed off the event loop (one that echoes a whole response object)."""
    number = 0

    def framed(event: dict[str, Any]) -> str:
        nonlocal number
        if numbered:
            event = {**event, "sequence_number": number}
            number += 1
        return frame(event, event["type"])

    sent = False
    try:
        async with aclosing(events):  # a client that leaves ends the run now, not at GC
            async for event in events:
                yield await asyncio.to_thread(framed, event) if large(event) \
                    else framed(event)
                sent = True
    except (EngineDead, BackendFailed) as exc:
        if isinstance(exc, BackendFailed) and not sent:
            raise  # nothing streamed yet: the route answers the 502
        yield framed(error_event(stream_error(exc)))


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
    yield frame(body)
    yield DONE
