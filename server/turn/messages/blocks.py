"""The Messages API's content blocks, checked one by one and turned into chat messages.

The turn runs on chat messages (the chat route's way through memory), so a Messages
conversation becomes the messages a chat client would have sent: `system` (a string or
text blocks) the system message, a `system` message in `messages` (Claude Code's
environment) a system message where it stands, an assistant message's thinking, text and
tool_use blocks one assistant message (its reasoning, its text, its calls: what the ledger
recorded for the answer, so the next turn replays its ids), a user message's tool_result
blocks one tool message each, before the user's own text. `cache_control` is accepted on
any block and has no effect: vLLM's prefix cache needs no breakpoints.
"""

from __future__ import annotations

import json
from typing import Any

from server.http.errors import APIError
from server.turn.dialects.params import bad_param
from server.turn.dialects.tools import ToolForm

# Claude Code's first system block: its version and a hash that changes with every
# request. Kept, it would make each prompt new from its first tokens, and the ledger would
# never find the conversation again (vLLM's Messages route leaves it out too).
BILLING_HEADER = "x-anthropic-billing-header"
# What a tool result's image becomes: the model reads text only, and the conversation
# must go on (a 400 would stop the client's tool loop for good).
IMAGE_PLACEHOLDER = "[an image: not shown, this model reads text only]"
MAX_ID_CHARS = 256  # a tool_use id, as the chat route's call ids: text in every prompt


def _block_kind(block: Any, param: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise bad_param(param, "a content block is an object with a type")
    return block["type"]


def _text(block: dict, param: str, key: str = "text") -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise bad_param(f"{param}.{key}", "a string is required")
    return value


def _unsupported(kind: str, param: str, allowed: str) -> APIError:
    why = ("this model reads text only" if kind in ("image", "document")
           else f"not a block this server takes here ({allowed})")
    return bad_param(f"{param}.type", f"'{kind[:40]}': {why}", code="unsupported_value")


def system_text(system: str | list[dict[str, Any]] | None) -> str | None:
    """`system` as one text: text blocks joined by newlines (as vLLM joins text parts),
    Claude Code's per-request billing header left out."""
    if system is None or isinstance(system, str):
        return system or None
    return _system_blocks_text(system, "system")


def _system_blocks_text(system: str | list[Any], at: str) -> str | None:
    """A system prompt's or a system message's text blocks as one text, without the
    billing header; `at` names it in an error."""
    if isinstance(system, str):
        return None if system.startswith(BILLING_HEADER) else system or None
    texts = []
    for n, block in enumerate(system):
        param = f"{at}[{n}]"
        if _block_kind(block, param) != "text":
            raise _unsupported(block["type"], param, "text")
        text = _text(block, param)
        if not text.startswith(BILLING_HEADER):
            texts.append(text)
    return "\n".join(texts) or None


def chat_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """The conversation as chat messages; a 400 naming the message and block for anything
    this server cannot take."""
    out: list[dict[str, Any]] = []
    for n, message in enumerate(messages):
        param = f"messages[{n}]"
        if not isinstance(message, dict):
            raise bad_param(param, "a message is an object with a role and content")
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise bad_param(f"{param}.role", "'user', 'assistant' or 'system'")
        content = message.get("content")
        if role == "system":
            # Claude Code 2.1 sends its environment as a system message after the user's
            # first one; vLLM's route keeps it in place, as Qwen's templates render it.
            if not isinstance(content, str | list):
                raise bad_param(f"{param}.content", "a string or a list of text blocks")
            text = _system_blocks_text(content, f"{param}.content")
            if text:
                out.append({"role": "system", "content": text})
        elif isinstance(content, str):
            out.append({"role": role, "content": content})
        elif isinstance(content, list):
            if role == "user":
                out += _user_messages(content, f"{param}.content")
            else:
                out.append(_assistant_message(content, f"{param}.content"))
        else:
            raise bad_param(f"{param}.content", "a string or a list of content blocks")
    return out


def _user_messages(blocks: list[Any], param: str) -> list[dict[str, Any]]:
    """A user message's blocks: each tool_result a tool message, then the user's text."""
    tools: list[dict[str, Any]] = []
    texts: list[str] = []
    for n, block in enumerate(blocks):
        at = f"{param}[{n}]"
        kind = _block_kind(block, at)
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "tool_result":
            tools.append(_tool_result(block, at))
        else:
            raise _unsupported(kind, at, "text, tool_result")
    if texts or not tools:
        return [*tools, {"role": "user", "content": "\n".join(texts)}]
    return tools


def _tool_result(block: dict, param: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise bad_param(f"{param}.tool_use_id", "the id of the tool_use this answers is required")
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for n, part in enumerate(content):
            at = f"{param}.content[{n}]"
            kind = _block_kind(part, at)
            if kind == "text":
                parts.append(_text(part, at))
            elif kind in ("image", "document"):
                parts.append(IMAGE_PLACEHOLDER)
            elif kind == "tool_reference":
                parts.append(_tool_reference(part, at))
            else:
                raise _unsupported(kind, at, "text, image, tool_reference")
        text = "\n".join(parts)
    else:
        raise bad_param(f"{param}.content", "a string or a list of text blocks")
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise bad_param(f"{param}.is_error", "true or false")
    # A chat tool message has no error flag: the model reads it in the result's words.
    return {"role": "tool", "tool_call_id": call_id,
            "content": f"Error: {text}" if is_error else text}


def _tool_reference(block: dict, param: str) -> str:
    """A tool search's result (Claude Code's ToolSearch answers with these): it loads a
    deferred tool. The client sends each tool it loaded in `tools`, which this server
    renders whole in every prompt, so the reference is a line that names it; a 400 here
    would stop every Claude Code session with an MCP server (its tools are deferred)."""
    name = block.get("tool_name")
    if not isinstance(name, str) or not name.strip():
        raise bad_param(f"{param}.tool_name", "the referenced tool's name is required")
    return f"Tool loaded: {name} (call it as any other tool)"


def _assistant_message(blocks: list[Any], param: str) -> dict[str, Any]:
    """One answer's blocks as one assistant message: its texts joined as they were shown
    (they are pieces of one answer), its reasoning joined, its calls after."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for n, block in enumerate(blocks):
        at = f"{param}[{n}]"
        kind = _block_kind(block, at)
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "thinking":
            reasoning.append(_text(block, at, "thinking"))  # its signature: not checked
        elif kind == "redacted_thinking":
            continue  # Anthropic's encrypted reasoning: nothing a local model can read
        elif kind == "tool_use":
            calls.append(_tool_use(block, at))
        else:
            raise _unsupported(kind, at, "text, thinking, redacted_thinking, tool_use")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_use(block: dict, param: str) -> dict[str, Any]:
    call_id, name = block.get("id"), block.get("name")
    if not isinstance(call_id, str) or not call_id or len(call_id) > MAX_ID_CHARS:
        raise bad_param(f"{param}.id", f"a non-empty string of at most {MAX_ID_CHARS} characters")
    if not isinstance(name, str) or not name:
        raise bad_param(f"{param}.name", "the tool's name is required")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise bad_param(f"{param}.input", "an object (the tool's arguments)")
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _function(tool: dict, param: str) -> dict[str, Any]:
    """A custom tool's chat `function`: its name, `input_schema` and description."""
    name, schema = tool.get("name"), tool.get("input_schema")
    if not isinstance(name, str) or not name:
        raise bad_param(f"{param}.name", "the tool's name is required")
    if not isinstance(schema, dict):
        raise bad_param(f"{param}.input_schema", "a JSON schema object is required")
    function: dict[str, Any] = {"name": name, "parameters": schema}
    if tool.get("description") is not None:
        if not isinstance(tool["description"], str):
            raise bad_param(f"{param}.description", "a string")
        function["description"] = tool["description"]
    return function


# A server tool of Anthropic's (`web_search_20250305`, `code_execution_...`: a `type`
# other than `custom`) cannot run here: left out with a warning, as on the Responses wire.
TOOLS = ToolForm(wire="messages", runs_here=lambda tool: tool.get("type") in (None, "custom"),
                 function=_function)


def chat_tool_choice(choice) -> tuple[str | dict[str, Any] | None, bool | None]:
    """`tool_choice` as the chat route's, and its parallel_tool_calls."""
    if choice is None:
        return None, None
    chat = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type) or {
        "type": "function", "function": {"name": choice.name}}
    parallel = None if choice.disable_parallel_tool_use is None \
        else not choice.disable_parallel_tool_use
    return chat, parallel
