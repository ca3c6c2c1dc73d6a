"""Renders a chat request to prompt token ids with the model's chat template.

The server hands vLLM token ids, never text, so what it renders is exactly what runs.
"""

from __future__ import annotations

from typing import Any

from server.errors import APIError
from server.schema import ChatCompletionRequest, ChatMessage


def _message_dict(message: ChatMessage) -> dict[str, Any]:
    try:
        content = message.text()
    except ValueError as exc:
        raise APIError(400, f"messages: {exc}", code="invalid_value", param="messages") from None
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


def render_prompt_ids(
    tokenizer, request: ChatCompletionRequest, enable_thinking: bool
) -> list[int]:
    messages = [_message_dict(m) for m in request.messages]
    text = tokenizer.apply_chat_template(
        messages,
        tools=tools_for_template(request),
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
        tokenize=False,
    )
    return tokenizer.encode(text, add_special_tokens=False)
