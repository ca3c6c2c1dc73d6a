"""Builds a request's prompt token ids: the ledger's exact ids, the new messages, tail notes.

The server hands vLLM token ids, never text, so what it builds is exactly what runs. When
the ledger holds the conversation so far, the prompt starts with those exact ids (hidden
blocks and earlier tail notes included) and only the new messages are rendered; the chat
template is still the judge of how they render, by rendering the whole conversation and
taking what follows the recorded part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conductor.ledger import Match, Span, VisibleMessage
from server.errors import APIError
from server.memory import strip_status_lines
from server.schema import ChatCompletionRequest, ChatMessage

IM_END_TEXT = "<|im_end|>"


@dataclass(frozen=True)
class Tail:
    """A hidden message placed right after the turn's new messages (card, index, notes)."""

    kind: str
    text: str
    note_ids: tuple[str, ...] = ()


def _text(message: ChatMessage) -> str:
    try:
        return message.text()
    except ValueError as exc:
        raise APIError(400, f"messages: {exc}", code="invalid_value", param="messages") from None


def _message_dict(message: ChatMessage) -> dict[str, Any]:
    content = _text(message)
    if message.role == "assistant":
        content = strip_status_lines(content)
    role = "system" if message.role == "developer" else message.role
    out: dict[str, Any] = {"role": role, "content": content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    if message.reasoning_content:
        out["reasoning_content"] = message.reasoning_content
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    return out


def tools_for_template(request: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """The tool definitions the model sees; none when tool_choice is "none"."""
    if not request.tools or request.tool_choice == "none":
        return None
    return [t.model_dump(exclude_none=True) for t in request.tools]


def visible_messages(request: ChatCompletionRequest) -> list[VisibleMessage]:
    """The conversation as the client holds it, in the ledger's terms.

    The tool definitions come first as a pseudo-message: a change of tools changes the
    system prompt, so a record made with other tools must not match.
    """
    tools = tools_for_template(request)
    out = [VisibleMessage.of("tools", None, [("tools", tools)])] if tools else []
    for message in request.messages:
        role = "system" if message.role == "developer" else message.role
        content = _text(message)
        if role == "assistant":
            content = strip_status_lines(content)
        calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        out.append(VisibleMessage.of(role, content, calls))
    return out


def tail_message(text: str) -> str:
    return f"<|im_start|>system\n{text}{IM_END_TEXT}\n"


@dataclass(frozen=True)
class BuiltPrompt:
    ids: list[int]
    spans: list[Span]  # tail spans, in prompt-id offsets
    replayed_tokens: int  # ids taken from the ledger as they were


def build_prompt(tokenizer, request: ChatCompletionRequest, enable_thinking: bool,
                 match: Match | None, tails: list[Tail]) -> BuiltPrompt:
    messages = [_message_dict(m) for m in request.messages]
    tools = tools_for_template(request)

    def render(items: list[dict[str, Any]], generation: bool) -> str:
        return tokenizer.apply_chat_template(items, tools=tools, tokenize=False,
                                             add_generation_prompt=generation,
                                             enable_thinking=enable_thinking)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) if text else []

    history = render(messages, generation=False)
    with_prompt = render(messages, generation=True)
    if not with_prompt.startswith(history):  # a template we cannot split: no tails
        return BuiltPrompt(encode(with_prompt), [], 0)
    generation_prompt = with_prompt[len(history):]

    base: list[int] = []
    new_text = history
    if match is not None:
        prefix = render(messages[: match.matched_messages], generation=False)
        cut = prefix.rfind(IM_END_TEXT)
        if cut >= 0:
            cut += len(IM_END_TEXT) if match.record.ended_cleanly else 0
            if history[:cut] == prefix[:cut]:
                base, new_text = list(match.record.ids), history[cut:]
    ids = base + encode(new_text)
    spans = []
    for tail in tails:
        start = len(ids)
        ids += encode(tail_message(tail.text))
        spans.append(Span(start, len(ids), tail.kind, tail.note_ids))
    ids += encode(generation_prompt)
    return BuiltPrompt(ids, spans, len(base))
