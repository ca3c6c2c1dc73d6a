"""The stream loop the Messages and Responses APIs share: a chat answer, delta by delta,
made into one dialect's events.

The loop is the same for both wires: wait for the engine's first delta (a stream's first
event waits for it, as a chat stream's does), open the dialect's stream, hand each delta's
reasoning, text and tool calls to the dialect's builder, and on the answer's end its last
delta, then the dialect's closing events. A client that leaves, a cancelled task or an
engine that dies ends the answer where the client's text did (in the ledger too) and
tells the dialect (`cut`); a backend that fails it (proxy mode) tells the dialect and
records nothing (before the first event, where the route's 502 is the answer, it does
not tell the dialect either). The error goes on to the stream's framing (`server.http.
sse.typed_events`), which ends the stream with the dialect's error event. Each dialect
keeps only its event shapes (`Emitter`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Protocol

from engine.backend import BackendFailed, EngineBackend, EngineDead
from server.turn.answering.answer import Answer
from server.turn.answering.engine_tools import EngineToolbox
from server.turn.answering.generate import answer_deltas
from server.turn.answering.output_parser import ParsedDelta, ToolCall

Event = dict[str, Any]


class Emitter(Protocol):
    """One dialect's builder of an answer's parts: each call returns the events of what
    changed (a part opened, grown, closed)."""

    def on_reasoning(self, text: str) -> list[Event]: ...

    def on_text(self, text: str) -> list[Event]: ...

    def on_tool_call(self, call: ToolCall) -> list[Event]: ...


def fed(emitter: Emitter, parsed: ParsedDelta) -> list[Event]:
    """The events of one parsed delta: its reasoning, then its text, then its calls (the
    order the model writes them)."""
    events: list[Event] = []
    if parsed.reasoning:
        events += emitter.on_reasoning(parsed.reasoning)
    if parsed.content:
        events += emitter.on_text(parsed.content)
    for call in parsed.tool_calls:
        events += emitter.on_tool_call(call)
    return events


def _no_cut(_error: BaseException) -> None:
    pass


async def dialect_events(engine: EngineBackend, answer: Answer,
                         toolbox: EngineToolbox | None, emitter: Emitter, *,
                         opened: Callable[[], list[Event]],
                         ended: Callable[[], AsyncIterator[Event]],
                         cut: Callable[[BaseException], None] = _no_cut
                         ) -> AsyncIterator[Event]:
    """The answer's events: `opened()` once the engine's first delta came, the builder's
    events as the deltas come, then those of the answer's last delta and `ended()`'s.
    `cut` (which must not wait) has the error that stopped the answer early; not a
    backend's failure before the first event, which is the route's 502 alone."""
    deltas = answer_deltas(engine, answer, toolbox)
    streamed = False  # an event gone to the client: server.http.sse.typed_events's `sent`
    try:
        first = await anext(deltas, None)
        for event in opened():
            streamed = True
            yield event
        if first is not None:
            for event in fed(emitter, first):
                streamed = True
                yield event
            async for parsed in deltas:
                for event in fed(emitter, parsed):
                    streamed = True
                    yield event
    except (GeneratorExit, asyncio.CancelledError, EngineDead) as error:
        answer.stopped()  # the record ends where the client's text did
        cut(error)
        raise
    except BackendFailed as error:
        # proxy mode keeps nothing of an answer its backend lost, as on the chat route:
        # the same turn goes through whole once the backend is back. Before any event the
        # route's 502 is the whole answer: the dialect is not told (a Responses run would
        # store a failed response whose id the client never saw)
        if streamed:
            cut(error)
        raise
    for event in fed(emitter, answer.finish()):
        yield event
    async with aclosing(ended()) as closing:
        async for event in closing:
            yield event
