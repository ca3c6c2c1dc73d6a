"""An answer's content blocks as the model writes them, and the stream events that show them.

The parsed answer (reasoning, the text the client is shown, tool calls) fills blocks
in the order it comes: a `thinking` block, a `text` block, a `tool_use` block a call.
Each block is opened (`content_block_start`; the first one followed by a `ping`, as
Anthropic's stream has it), grown by deltas (`thinking_delta`, `text_delta`,
`input_json_delta`) and closed (`content_block_stop`; a thinking block's signature
first) when the next kind starts or the answer ends. The same builder serves a whole
message, whose events are not sent.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from server.turn.answering.output_parser import ToolCall
from server.turn.dialects.stream import Event

_FIELD = {"text": "text", "thinking": "thinking"}  # the field a block's deltas grow


def signature(thinking: str) -> str:
    """A thinking block's `signature`. Anthropic's clients require one and send it back;
    this server signs nothing (a sent-back block is read as the answer's reasoning,
    whatever its signature), so it is a digest of the text, the same for the same text."""
    return hashlib.blake2b(thinking.encode("utf-8", "surrogatepass"),
                           digest_size=24).hexdigest()


def tool_input(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the tool_use block's `input` (an object, as Anthropic's API
    has it; the parser gives a call only for a JSON body, whose arguments are one)."""
    try:
        value = json.loads(call.arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class ContentBlocks:
    """The blocks of one answer (the stream loop's `Emitter`:
    server/turn/dialects/stream.py); each call returns the events of what changed."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the block deltas go to, if any

    def on_reasoning(self, text: str) -> list[Event]:
        return self._grow("thinking", text)

    def on_text(self, text: str) -> list[Event]:
        return self._grow("text", text)

    def close(self) -> list[Event]:
        """The open block stopped; an answer without any block gets an empty text block
        (Anthropic's shape of an empty answer: clients read content[0])."""
        events = self._stop()
        if not self.blocks:
            events += self._start({"type": "text", "text": ""})
            events += self._stop()
        return events

    def _grow(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open["type"] != kind:
            events += self._stop()
            events += self._start({"type": kind, _FIELD[kind]: ""})
        self._open[_FIELD[kind]] += text
        events.append({"type": "content_block_delta", "index": len(self.blocks) - 1,
                       "delta": {"type": f"{kind}_delta", _FIELD[kind]: text}})
        return events

    def _start(self, block: dict[str, Any]) -> list[Event]:
        first = not self.blocks
        self.blocks.append(block)
        self._open = block
        shown = {**block, "signature": ""} if block["type"] == "thinking" else dict(block)
        events: list[Event] = [{"type": "content_block_start", "index": len(self.blocks) - 1,
                                "content_block": shown}]
        return [*events, {"type": "ping"}] if first else events

    def _stop(self) -> list[Event]:
        block, self._open = self._open, None
        if block is None:
            return []
        index = len(self.blocks) - 1
        events: list[Event] = []
        if block["type"] == "thinking":
            block["signature"] = signature(block["thinking"])
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "signature_delta",
                                     "signature": block["signature"]}})
        return [*events, {"type": "content_block_stop", "index": index}]

    def on_tool_call(self, call: ToolCall) -> list[Event]:
        """A parsed call comes whole: started, its input in one delta, stopped."""
        events = self._stop()
        arguments = tool_input(call)
        events += self._start({"type": "tool_use", "id": call.id, "name": call.name,
                               "input": {}})
        self._open["input"] = arguments
        events.append({"type": "content_block_delta", "index": len(self.blocks) - 1,
                       "delta": {"type": "input_json_delta",
                                 "partial_json": json.dumps(arguments, ensure_ascii=False)}})
        return [*events, *self._stop()]


def usage(chat_usage: dict[str, Any]) -> dict[str, int]:
    """The chat turn's usage in Anthropic's names: `input_tokens` are the prompt's tokens
    the engine computed, `cache_read_input_tokens` those the prefix cache served (their sum
    is the prompt, as count_tokens counts it). Nothing is written to a cache a client
    pays for: `cache_creation_input_tokens` is 0."""
    prompt = chat_usage["prompt_tokens"]
    cached = chat_usage["prompt_tokens_details"]["cached_tokens"]
    return {"input_tokens": prompt - cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": chat_usage["completion_tokens"]}


def stop_reason(answer) -> tuple[str, str | None]:
    """Anthropic's (stop_reason, stop_sequence) of a finished `Answer`: a call is
    `tool_use`, a stop string `stop_sequence` (and which), the length `max_tokens`."""
    if answer.client_calls:
        return "tool_use", None
    last = answer.last
    if last is not None and isinstance(last.stop_reason, str):
        return "stop_sequence", last.stop_reason
    if answer.finish_reason == "length":
        return "max_tokens", None
    return "end_turn", None


def message(message_id: str, model: str, content: list[dict[str, Any]],
            stop: tuple[str | None, str | None], used: dict[str, int]) -> dict[str, Any]:
    """The message object (`content` empty and `stop` None in `message_start`)."""
    return {"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop[0], "stop_sequence": stop[1],
            "usage": used}
