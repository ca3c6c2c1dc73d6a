"""`tool_choice` "required" and a named function, enforced as vLLM does: the answer is
generated under a JSON schema (xgrammar) over the call, and the JSON becomes the call.

"required": an array of `{"name", "parameters"}` objects, one of the client's tools each;
a named function: that function's arguments object. As in vLLM (and OpenAI), the first
finishes with `tool_calls`, the second with `stop`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server.http.errors import APIError
from server.http.schema import ChatCompletionRequest
from server.turn.answering.output_parser import ToolCall

ANY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ForcedChoice:
    schema: dict[str, Any]
    name: str | None  # the named function; None for "required"

    @property
    def finish_reason(self) -> str:
        return "stop" if self.name is not None else "tool_calls"

    def calls(self, text: str) -> list[ToolCall]:
        """The calls the generated JSON holds; none when it is not whole (cut by length)."""
        try:
            data = json.loads(text)
        except ValueError:
            return []
        if self.name is not None:
            return [ToolCall(self.name, json.dumps(data, ensure_ascii=False))]
        return [ToolCall(c["name"], json.dumps(c.get("parameters", {}), ensure_ascii=False))
                for c in data if isinstance(c, dict) and isinstance(c.get("name"), str)]


def _parameters(tool) -> dict[str, Any]:
    return tool.function.parameters or ANY_OBJECT


DEFINITIONS = ("$defs", "definitions")  # where a JSON schema keeps what `$ref`s point at


def _rooted(schema: dict[str, Any], parameters: list[dict[str, Any]]) -> dict[str, Any]:
    """`schema`, which nests the tools' parameter schemas, with their definitions moved
    to its root: their `$ref`s (`#/$defs/Name`) point at the root of the whole schema.
    Two tools that define one name differently are a 400 (as vLLM's)."""
    for parameter in parameters:
        for key in DEFINITIONS:
            for name, definition in (parameter.get(key) or {}).items():
                kept = schema.setdefault(key, {}).setdefault(name, definition)
                if kept != definition:
                    raise APIError(400, f"tools: two tools define {key}/{name} differently",
                                   code="invalid_value", param="tools")
    return schema


def _without_definitions(parameters: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in parameters.items() if k not in DEFINITIONS}


def forced_choice(request: ChatCompletionRequest) -> ForcedChoice | None:
    """The schema a forcing `tool_choice` puts on the answer; None for auto and none."""
    choice = request.tool_choice
    if choice not in ("required",) and not isinstance(choice, dict):
        return None
    if not request.tools:
        raise APIError(400, "tool_choice forces a tool call, but the request has no tools",
                       code="invalid_value", param="tool_choice")
    if choice == "required":
        items = [{"type": "object", "properties": {
            "name": {"type": "string", "enum": [t.function.name]},
            "parameters": _without_definitions(_parameters(t))},
            "required": ["name", "parameters"]}
            for t in request.tools]
        schema = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": items}}
        if request.parallel_tool_calls is False:
            schema["maxItems"] = 1
        return ForcedChoice(_rooted(schema, [_parameters(t) for t in request.tools]), None)
    name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" \
        else None
    if not isinstance(name, str):
        raise APIError(400, 'tool_choice must be "none", "auto", "required" or '
                       '{"type": "function", "function": {"name": ...}}',
                       code="invalid_value", param="tool_choice")
    tool = next((t for t in request.tools if t.function.name == name), None)
    if tool is None:
        raise APIError(400, f"tool_choice names {name!r}, which is not among the tools",
                       code="invalid_value", param="tool_choice")
    return ForcedChoice(_parameters(tool), name)
