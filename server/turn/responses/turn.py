"""One Responses API turn: the conversation's items become a chat request, the chat turn
runs (memory, replay, the ledger: `server/turn/chat_turn.py`), and its answer comes back
as output items and the API's events.

The conversation a `previous_response_id` names is read from the store, so the client
sends only what is new; the messages it becomes are those the ledger recorded, so the
prompt replays the earlier turns' exact ids. `instructions` are not carried over from
the previous response (OpenAI's rule): each request's own go first, as a system message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from conductor.memory.interface import MemoryDoor
from conductor.memory.types import StoredResponse, new_response_id
from engine.backend import BackendFailed, EngineBackend, EngineDead
from engine.profiles import Profile
from server.http.errors import APIError, validation_error
from server.http.responses_schema import ResponsesRequest
from server.http.schema import ChatCompletionRequest
from server.http.server_defaults import with_server_defaults
from server.http.sse import stream_error
from server.turn import chat_turn
from server.turn.answering.engine_tools import EngineToolbox
from server.turn.answering.respond import start_answer
from server.turn.continuous import prepare_continuous
from server.turn.dialects.stream import Event, dialect_events
from server.turn.dialects.tools import chat_tools
from server.turn.prepared import PreparedChat
from server.turn.responses import items as item_forms
from server.turn.responses.output import OutputItems
from server.turn.responses.shape import ResponseShape, usage

# The chat request's names for a Responses request's fields, in the errors a client reads.
_PARAM_NAMES = (("response_format.json_schema.schema", "text.format.schema"),
                ("response_format", "text.format"),
                ("max_completion_tokens", "max_output_tokens"),
                ("reasoning_effort", "reasoning.effort"), ("messages", "input"))


def as_responses_error(error: APIError) -> APIError:
    """A chat turn's refusal, naming the Responses request's fields."""
    message, param = error.message, error.param
    for chat_name, name in _PARAM_NAMES:
        message = message.replace(chat_name, name)
        if param is not None and param.startswith(chat_name):
            param = name + param[len(chat_name):]
    if param is not None and param.startswith("input."):
        # a chat message's number is not an input item's (instructions and the earlier
        # conversation come first): the whole input is named
        param = "input"
    return APIError(error.status, message, code=error.code, param=param, kind=error.kind)


def chat_request(request: ResponsesRequest, conversation: list[dict[str, Any]]
                 ) -> ChatCompletionRequest:
    """The chat request a chat client would send for this conversation."""
    messages = item_forms.chat_messages(conversation)
    if request.instructions:
        messages.insert(0, {"role": "system", "content": request.instructions})
    body = {
        "model": request.model, "messages": messages,
        "tools": chat_tools(request.tools, item_forms.TOOLS),
        "tool_choice": item_forms.chat_tool_choice(request.tool_choice),
        "parallel_tool_calls": request.parallel_tool_calls,
        "response_format": item_forms.chat_response_format(
            request.text.format if request.text is not None else None),
        "max_completion_tokens": request.max_output_tokens,
        "temperature": request.temperature, "top_p": request.top_p,
        "reasoning_effort": request.reasoning.effort if request.reasoning else None,
        "script": request.script,
    }
    try:
        return ChatCompletionRequest.model_validate(
            {k: v for k, v in body.items() if v is not None})
    except ValidationError as exc:
        raise as_responses_error(validation_error(exc)) from None


@dataclass
class ResponseTurn:
    """A prepared response: its shape, the chat turn it runs, the items before its output."""

    shape: ResponseShape
    chat: PreparedChat
    context: list[dict[str, Any]]
    items: list[dict[str, Any]]  # what this request added: all the store keeps of its input


def previous_conversation(stored: StoredResponse | None, request: ResponsesRequest
                          ) -> list[dict[str, Any]]:
    """The items a `previous_response_id` continues; a 400 naming the field when it is
    not this user's stored, finished response (another user's is not found either)."""
    if request.previous_response_id is None:
        return []
    if stored is None:
        raise APIError(400, f"previous_response_id: Response with id "
                       f"{request.previous_response_id!r} not found.",
                       code="previous_response_not_found",
                       param="previous_response_id")
    if stored.response.get("status") in ("queued", "in_progress"):
        raise APIError(400, "previous_response_id: that response has not finished yet",
                       code="invalid_value", param="previous_response_id")
    return stored.conversation  # an empty answer is still the ledger's turn


def prepare(engine: EngineBackend, profile: Profile, services: MemoryDoor,
            request: ResponsesRequest, previous: list[dict[str, Any]], headers,
            peer: str | None, key_user: str | None) -> ResponseTurn:
    """The chat turn of this response, on the profile's way (the continuous
    conversation's on a continuous profile); APIError naming the Responses fields."""
    items = item_forms.input_items(request.input)
    context = [*previous, *items]
    chat = with_server_defaults(chat_request(request, context), profile)
    build = (prepare_continuous if profile.memory.conversation == "continuous"
             else chat_turn.prepare)
    try:
        prepared = build(engine, profile, services, chat, headers, peer, key_user)
    except APIError as error:
        raise as_responses_error(error) from None
    if request.background:  # no one waits on it: interactive requests go first
        prepared.params = dataclasses.replace(prepared.params, deferred=True)
    shape = ResponseShape(id=new_response_id(), model=prepared.model, request=request,
                          tools=list(request.tools or []))
    return ResponseTurn(shape=shape, chat=prepared, context=context, items=items)


class ResponseRun:
    """One response on the engine: `events` runs it; `output` and `answer` hold what was
    written so far (a cancelled response keeps it). `finished` is the completed object
    once `events` has it, so a cancel that lands while it is being stored keeps it."""

    def __init__(self, engine: EngineBackend, services: MemoryDoor, turn: ResponseTurn,
                 toolbox: EngineToolbox | None) -> None:
        self.engine, self.turn = engine, turn
        self.answer, self._toolbox = start_answer(engine, services, turn.chat, toolbox)
        self.output = OutputItems()
        self.finished: dict[str, Any] | None = None
        self._failed: dict[str, Any] | None = None

    def events(self, on_final: Callable[[dict[str, Any]], Awaitable[None]],
               on_cut: Callable[[dict[str, Any]], None] = lambda _final: None
               ) -> AsyncIterator[Event]:
        """From `response.created` to `response.completed` (or `response.incomplete`);
        `on_final` has the finished object before the last event, `on_cut` (which must
        not wait) what was written when the client leaves or the run is cancelled, or
        the `failed` object when the engine or the backend fails it (the stream's
        framing then ends it with `response.failed`). The first event waits for the
        engine's first delta, as a chat stream's does."""

        def cut(error: BaseException) -> None:
            if isinstance(error, EngineDead | BackendFailed):
                on_cut(self.failed(stream_error(error)))
            else:
                on_cut(self.final("cancelled"))

        async def ended() -> AsyncIterator[Event]:
            length = self.answer.finish_reason == "length"
            for event in self.output.close("incomplete" if length else "completed"):
                yield event
            self.finished = self.final("incomplete" if length else "completed")
            await on_final(self.finished)
            yield {"type": f"response.{self.finished['status']}", "response": self.finished}

        return dialect_events(self.engine, self.answer, self._toolbox, self.output,
                              opened=self._started, ended=ended, cut=cut)

    def _started(self) -> list[Event]:
        started = self.turn.shape.object("in_progress")
        return [{"type": "response.created", "response": started},
                {"type": "response.in_progress", "response": started}]

    def failed(self, error: APIError) -> dict[str, Any]:
        """The response object failed by an engine or a backend (`error`: what the stream
        tells the client), what was written before kept; the same object each call, as
        it is stored and as the stream's `response.failed` carries it."""
        if self._failed is None:
            self._failed = self.final("failed", {"code": "server_error",
                                                 "message": error.message})
        return self._failed

    def final(self, status: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response object as it stands: "completed", "incomplete" (cut by its
        length), "cancelled" or "failed" (what was written before, and `error`)."""
        if status in ("cancelled", "failed"):
            self.output.close("incomplete")
        reasoning = self.answer.reasoning
        return self.turn.shape.object(
            status, self.output.items,
            usage(self.answer.usage(), self.engine.count_tokens(reasoning) if reasoning else 0),
            error=error, incomplete="max_output_tokens" if status == "incomplete" else None)
