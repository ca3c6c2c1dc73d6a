"""The Responses API's items, checked one by one and turned into chat messages.

A conversation here is a list of items, each with an id: the input items of every turn
and the output items of every answer, as `GET /v1/responses/{id}/input_items` lists
them. The turn runs on chat messages (the chat route's way through memory), so the items
become the messages a chat client would have sent: an answer's reasoning, text and
function calls one assistant message, a function call's output one tool message. Those
messages are what the ledger recorded for the answer, so the next turn replays its ids.
"""

from __future__ import annotations

import secrets
from typing import Any

from server.turn.dialects.params import bad_param
from server.turn.dialects.tools import ToolForm

INPUT_ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _text_of(content: Any, param: str, allowed: tuple[str, ...] = TEXT_PARTS) -> str:
    """A string, or the text parts joined; any other part (an image, a file) refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_param(param, "a string or a list of text parts")
    texts = []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed or not isinstance(part.get("text"), str):
            shown = kind if isinstance(kind, str) else "not a text part"
            raise bad_param(f"{param}[{n}]", f"'{shown}' is not served: only text parts "
                            f"({', '.join(allowed)})", code="unsupported_value")
        texts.append(part["text"])
    return "".join(texts)


# The longest id (an item's, a call's) a request may give: stored with the response, an id
# of any length would let one request store megabytes under a name.
MAX_ID_CHARS = 256


def _string(item: dict, key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise bad_param(f"{param}.{key}", "a non-empty string is required")
    if key.endswith("id") and len(value) > MAX_ID_CHARS:
        raise bad_param(f"{param}.{key}", f"at most {MAX_ID_CHARS} characters")
    return value


def input_items(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's `input` as items in their stored form, each with an id; a 400 that
    names the item and its field for anything else."""
    if isinstance(value, str):
        return [{"type": "message", "id": new_id("msg"), "role": "user", "status": "completed",
                 "content": [{"type": "input_text", "text": value}]}]
    return [_one_item(item, f"input[{n}]") for n, item in enumerate(value)]


def _one_item(item: Any, param: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise bad_param(param, "an item is an object")
    if item.get("id") is not None and not isinstance(item["id"], str):
        raise bad_param(f"{param}.id", "an item's id is a string")
    if len(item.get("id") or "") > MAX_ID_CHARS:
        raise bad_param(f"{param}.id", f"at most {MAX_ID_CHARS} characters")
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        if role not in INPUT_ROLES:
            raise bad_param(f"{param}.role", f"one of {', '.join(INPUT_ROLES)}")
        part = "output_text" if role == "assistant" else "input_text"
        text = _text_of(item.get("content"), f"{param}.content")
        return {"type": "message", "id": item.get("id") or new_id("msg"), "role": role,
                "status": "completed", "content": [{"type": part, "text": text}]}
    if kind == "function_call":
        arguments = item.get("arguments", "{}")
        if not isinstance(arguments, str):
            raise bad_param(f"{param}.arguments", "a string of JSON")
        return {"type": "function_call", "id": item.get("id") or new_id("fc"),
                "call_id": _string(item, "call_id", param), "name": _string(item, "name", param),
                "arguments": arguments, "status": "completed"}
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else _text_of(output, f"{param}.output")
        return {"type": "function_call_output", "id": item.get("id") or new_id("fco"),
                "call_id": _string(item, "call_id", param), "output": text,
                "status": "completed"}
    if kind == "reasoning":
        text = reasoning_text(item, param)
        return {"type": "reasoning", "id": item.get("id") or new_id("rs"), "summary": [],
                "content": [{"type": "reasoning_text", "text": text}]}
    shown = kind if isinstance(kind, str) else "(none)"
    raise bad_param(f"{param}.type", f"'{shown}' is not an item this server takes "
                    "(message, function_call, function_call_output, reasoning)",
                    code="unsupported_value")


def reasoning_text(item: dict, param: str) -> str:
    """A reasoning item's text: its content, else its summary (the model's own words are
    what the template replays)."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if parts:
            return _text_of(parts, f"{param}.{key}")
    return ""


ANSWER_ITEMS = ("reasoning", "function_call")  # with an assistant message: one answer's


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation's items as chat messages. A run of answer items (reasoning,
    assistant messages, function calls) is one assistant message, as the ledger recorded
    the answer: its texts joined in order, its reasoning joined, its calls after."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        answer = kind in ANSWER_ITEMS or (kind == "message" and item["role"] == "assistant")
        if not answer:
            if kind == "function_call_output":
                messages.append({"role": "tool", "tool_call_id": item["call_id"],
                                 "content": item["output"]})
            else:
                messages.append({"role": item["role"],
                                 "content": _text_of(item["content"], "")})
            continue
        if not messages or messages[-1].get("role") != "assistant":
            messages.append({"role": "assistant", "content": None})
        last = messages[-1]
        if kind == "reasoning":
            last["reasoning_content"] = (last.get("reasoning_content") or "") + \
                reasoning_text(item, "")
        elif kind == "message":
            last["content"] = (last["content"] or "") + _text_of(item["content"], "")
        else:
            last.setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function",
                 "function": {"name": item["name"], "arguments": item["arguments"]}})
    return messages


def _function(tool: dict, param: str) -> dict[str, Any]:
    """A function tool's chat `function`: its name, description and parameters."""
    function = {"name": _string(tool, "name", param)}
    if tool.get("description") is not None:
        # checked here: the chat request's check would name the chat route's tool
        if not isinstance(tool["description"], str):
            raise bad_param(f"{param}.description", "a string")
        function["description"] = tool["description"]
    if tool.get("parameters") is not None:
        if not isinstance(tool["parameters"], dict):
            raise bad_param(f"{param}.parameters", "a JSON schema object")
        function["parameters"] = tool["parameters"]
    return function


def _namespace(tool: dict) -> list[Any] | None:
    """A `namespace`'s tools: a group of function tools, served as the others."""
    if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
        return tool["tools"]
    return None


# A tool this server cannot run (a hosted one: `web_search`, `file_search`,
# `code_interpreter`, ...) is left out with a warning in the log, as an agent that offers
# it by default must still get its answer.
TOOLS = ToolForm(wire="responses", runs_here=lambda tool: tool.get("type") == "function",
                 function=_function, group=_namespace)


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """`{"type": "function", "name": N}` is the chat route's named function."""
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
        raise bad_param("tool_choice", "'none', 'auto', 'required' or "
                        '{"type": "function", "name": ...}')
    return {"type": "function", "function": {"name": choice["name"]}}


def chat_response_format(text_format: Any) -> dict[str, Any] | None:
    """`text.format` as the chat route's response_format (the same grammar path)."""
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return {"type": "json_object"}
    schema = {"name": text_format.name, "schema": text_format.schema_}
    if text_format.strict is not None:
        schema["strict"] = text_format.strict
    return {"type": "json_schema", "json_schema": schema}


