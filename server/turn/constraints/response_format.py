"""`response_format`: `json_object` and `json_schema` enforced as vLLM does, through its
structured outputs (xgrammar), streamed and not.

The engine runs xgrammar with `disable_any_whitespace`, so the JSON is compact: with free
whitespace a weak model writes `{` and then blank space until `max_tokens`. A constrained
answer is JSON and nothing else: it holds no memory block and no tool call (a
`<tandem_memory>` or `<tool_call>` inside a JSON string is text, not held back).
"""

from __future__ import annotations

from typing import Any

import jsonschema

from server.http.errors import APIError
from server.http.schema import ChatCompletionRequest

ANY_OBJECT: dict[str, Any] = {"type": "object"}


def _bad(message: str) -> APIError:
    return APIError(400, message, code="invalid_value", param="response_format")


def answer_schema(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The JSON schema the answer must follow; None for text (or no response_format)."""
    fmt = request.response_format
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ANY_OBJECT
    if kind != "json_schema":
        raise _bad("response_format.type must be 'text', 'json_object' or 'json_schema'")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise _bad("response_format.json_schema must be an object with a 'schema'")
    schema = spec.get("schema", ANY_OBJECT)
    if not isinstance(schema, dict):
        raise _bad("response_format.json_schema.schema must be a JSON schema object")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise _bad(f"response_format.json_schema.schema is not a valid JSON schema"
                   f"{f' at {where}' if where else ''}: {exc.message}") from None
    return schema
