"""One Messages API turn (Anthropic's wire: Claude Code, the `anthropic` SDK): the request
becomes a chat request, the chat turn runs (memory, replay, the ledger:
`server/turn/chat_turn.py`), and its answer comes back as content blocks and the API's
events.

The wire is a thin adapter, as the Responses API's is: nothing of memory is done here.
The conversation's messages become the chat messages the ledger recorded for each
answer, so a client that sends the whole history back (as Claude Code does each turn)
finds every earlier turn replayed id for id.

`max_tokens` is Anthropic's required bound, and clients send large ones (Claude Code
32,000 whatever the model's context): as vLLM does, the answer gets the smaller of it and
the room the prompt leaves. Memory lays its parts out as for a chat request without one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from conductor.memory.interface import MemoryDoor
from engine.backend import EngineBackend
from engine.profiles import Profile
from server.http.errors import APIError, validation_error
from server.http.schema import ChatCompletionRequest
from server.http.server_defaults import with_server_defaults
from server.turn import chat_turn
from server.turn.answering.engine_tools import EngineToolbox
from server.turn.answering.respond import start_answer
from server.turn.checks import ContextOverflow
from server.turn.continuous import prepare_continuous
from server.turn.dialects.stream import Event, dialect_events
from server.turn.dialects.tools import chat_tools
from server.turn.messages import blocks
from server.turn.messages.output import ContentBlocks, message, stop_reason, usage
from server.turn.messages.schema import CountTokensRequest, MessagesInput, MessagesRequest
from server.turn.prepared import PreparedChat

# The chat request's names for a Messages request's fields, in the errors a client reads.
_PARAM_NAMES = (("thinking_token_budget", "thinking.budget_tokens"),
                ("stop", "stop_sequences"))


def as_messages_error(error: APIError, max_model_len: int | None = None) -> APIError:
    """A chat turn's refusal, naming the Messages request's fields."""
    if isinstance(error, ContextOverflow) and max_model_len is not None:
        # Anthropic's words, which Claude Code reads to offer a compaction
        return APIError(400, f"prompt is too long: {error.prompt_tokens} tokens > "
                        f"{max_model_len - 1} maximum (this model's context is "
                        f"{max_model_len} tokens)", code=error.code, param="messages")
    message_text, param = error.message, error.param
    for chat_name, name in _PARAM_NAMES:
        if param is not None and param.startswith(chat_name):
            message_text = message_text.replace(chat_name, name, 1)
            param = name + param[len(chat_name):]
    if param is not None and param.startswith("messages."):
        # a chat message's number is not the request's (system first, tool results split)
        param = "messages"
    return APIError(error.status, message_text, code=error.code, param=param,
                    kind=error.kind)


def chat_request(request: MessagesInput, engine: EngineBackend) -> ChatCompletionRequest:
    """The chat request a chat client would send for this conversation (no max_tokens:
    see the module's docstring). A last assistant message is Anthropic's prefill: the
    answer continues it (memory off, as any request that shapes its prompt's end)."""
    messages = blocks.chat_messages(request.messages)
    system = blocks.system_text(request.system)
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    tool_choice, parallel = blocks.chat_tool_choice(request.tool_choice)
    thinking = request.thinking
    prefill = bool(messages) and messages[-1]["role"] == "assistant"
    body = {
        "model": request.model, "messages": messages,
        "tools": chat_tools(request.tools, blocks.TOOLS),
        "tool_choice": tool_choice, "parallel_tool_calls": parallel,
        # `thinking` left out: the profile's default, as on the chat route (and vLLM's
        # Messages route, which leaves it to the template)
        "chat_template_kwargs": {"enable_thinking": thinking.on} if thinking else None,
        "continue_final_message": prefill or None,
        "add_generation_prompt": False if prefill else None,
    }
    if thinking is not None and thinking.budget_tokens and engine.tokens.think is not None:
        body["thinking_token_budget"] = thinking.budget_tokens  # vLLM's reasoning budget
    if isinstance(request, MessagesRequest):
        body |= {"stream": request.stream, "stop": request.stop_sequences,
                 "temperature": request.temperature, "top_p": request.top_p,
                 "top_k": request.top_k, "script": request.script}
    try:
        return ChatCompletionRequest.model_validate(
            {k: v for k, v in body.items() if v is not None})
    except ValidationError as exc:
        raise as_messages_error(validation_error(exc)) from None


def _prepare_chat(engine: EngineBackend, profile: Profile, services: MemoryDoor,
                  chat: ChatCompletionRequest, headers, peer: str | None,
                  key_user: str | None, counting: bool = False) -> PreparedChat:
    continuous = profile.memory.conversation == "continuous" and not counting
    try:
        if continuous:
            return prepare_continuous(engine, profile, services, chat, headers, peer,
                                      key_user)
        return chat_turn.prepare(engine, profile, services, chat, headers, peer, key_user,
                                 counting=counting)
    except APIError as error:
        raise as_messages_error(error, profile.max_model_len) from None


def prepare(engine: EngineBackend, profile: Profile, services: MemoryDoor,
            request: MessagesRequest, headers, peer: str | None,
            key_user: str | None) -> PreparedChat:
    """The chat turn of this message, on the profile's way (the continuous
    conversation's on a continuous profile); APIError naming the Messages fields."""
    chat = with_server_defaults(chat_request(request, engine), profile)
    prepared = _prepare_chat(engine, profile, services, chat, headers, peer, key_user)
    room = profile.max_model_len - len(prepared.prompt_ids)
    prepared.params = dataclasses.replace(prepared.params,
                                          max_tokens=min(request.max_tokens, room))
    return prepared


def count_tokens(engine: EngineBackend, profile: Profile, services: MemoryDoor,
                 request: CountTokensRequest, headers, peer: str | None,
                 key_user: str | None) -> int:
    """The tokens the prompt of a Messages request with these fields holds, memory's
    hidden parts included: laid out as the turn would lay it out now, without what a turn
    sets off (a memory command, a miss noted). On a continuous profile, as a session's."""
    chat = chat_request(request, engine)
    return len(_prepare_chat(engine, profile, services, chat, headers, peer, key_user,
                             counting=True).prompt_ids)


class MessageRun:
    """One message on the engine: `events` runs it; `message` is the message object as it
    stands (whole once `events` has ended)."""

    def __init__(self, engine: EngineBackend, services: MemoryDoor, chat: PreparedChat,
                 toolbox: EngineToolbox | None) -> None:
        self.engine, self.chat = engine, chat
        self.answer, self._toolbox = start_answer(engine, services, chat, toolbox)
        self.blocks = ContentBlocks()
        self.id = "msg_" + chat.completion_id.removeprefix("chatcmpl-")
        self._stop: tuple[str | None, str | None] = (None, None)

    def events(self) -> AsyncIterator[Event]:
        """From `message_start` to `message_stop`. The first event waits for the engine's
        first delta, as a chat stream's does; a client that leaves (or an engine that
        dies) ends the answer where the client's text did, in the ledger too."""
        return dialect_events(self.engine, self.answer, self._toolbox, self.blocks,
                              opened=self._started, ended=self._ended)

    def _started(self) -> list[Event]:
        return [{"type": "message_start",
                 "message": message(self.id, self.chat.model, [], (None, None),
                                    usage(self.answer.usage()))}]

    async def _ended(self) -> AsyncIterator[Event]:
        for event in self.blocks.close():
            yield event
        self._stop = stop_reason(self.answer)
        yield {"type": "message_delta",
               "delta": {"stop_reason": self._stop[0], "stop_sequence": self._stop[1]},
               "usage": usage(self.answer.usage())}
        yield {"type": "message_stop"}

    def message(self) -> dict[str, Any]:
        return message(self.id, self.chat.model, self.blocks.blocks, self._stop,
                       usage(self.answer.usage()))
