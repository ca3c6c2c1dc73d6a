"""vLLM's `structured_outputs` request field: checked as vLLM checks it, then handed to
the engine's structured-output backend (xgrammar) as GenerationParams."""

from __future__ import annotations

import json
from typing import Any

from server.http.errors import APIError
from server.http.schema import StructuredOutputs


def structured_params(structured: StructuredOutputs | None) -> dict[str, Any]:
    """GenerationParams keyword arguments for the constraint (none without one)."""
    if structured is None:
        return {}
    if structured.choice is not None:
        return {"choices": tuple(structured.choice)}
    if structured.regex is not None:
        return {"regex": structured.regex}
    if structured.grammar is not None:
        return {"grammar": structured.grammar}
    schema = structured.json_
    if isinstance(schema, str):
        schema = json.loads(schema)  # checked by check_structured
    if isinstance(schema, dict):
        return {"json_schema": schema}
    return {"any_json": True}


def check_structured(structured: StructuredOutputs) -> None:
    """A 400 for a constraint the backend cannot compile (a bad regex, grammar or
    schema), found by vLLM's own xgrammar validation before the engine sees it."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams, check_json_nesting
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    if isinstance(structured.json_, str):
        try:
            json.loads(structured.json_)
        except ValueError:
            raise APIError(400, "structured_outputs.json: not a JSON schema",
                           code="invalid_value", param="structured_outputs") from None
    # What vLLM checks only when the engine adds the request (SamplingParams.verify)
    if structured.grammar is not None and not structured.grammar.strip():
        raise APIError(400, "structured_outputs.grammar cannot be an empty string",
                       code="invalid_value", param="structured_outputs.grammar")
    if structured.regex is not None and "\x00" in structured.regex:
        raise APIError(400, "structured_outputs.regex must not contain a NUL character",
                       code="invalid_value", param="structured_outputs.regex")
    params = structured_params(structured)
    constraint = StructuredOutputsParams(
        choice=list(params["choices"]) if "choices" in params else None,
        regex=params.get("regex"), grammar=params.get("grammar"),
        json=params.get("json_schema"), json_object=params.get("any_json"))
    try:
        check_json_nesting(constraint.json)
        validate_xgrammar_grammar(SamplingParams(structured_outputs=constraint))
    except (VLLMValidationError, ValueError, RuntimeError) as error:
        raise APIError(400, f"structured_outputs: {error}", code="invalid_value",
                       param="structured_outputs") from None
