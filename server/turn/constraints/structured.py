"""vLLM's `structured_outputs` request field: checked as vLLM checks it, then handed to
the engine's structured-output backend (xgrammar) as GenerationParams."""

from __future__ import annotations

import json
from typing import Any

from engine.generation import GenerationParams, structured_outputs
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
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    if isinstance(structured.json_, str):
        try:
            json.loads(structured.json_)
        except ValueError:
            raise APIError(400, "structured_outputs.json: not a JSON schema",
                           code="invalid_value", param="structured_outputs") from None
    # xgrammar's check passes an empty grammar by (it has nothing to compile); vLLM
    # refuses it only when the engine adds the request
    if structured.grammar is not None and not structured.grammar:
        raise APIError(400, "structured_outputs.grammar cannot be an empty string",
                       code="invalid_value", param="structured_outputs.grammar")
    constraint = structured_outputs(GenerationParams(**structured_params(structured)))
    try:
        validate_xgrammar_grammar(SamplingParams(structured_outputs=constraint))
    except (VLLMValidationError, ValueError, RuntimeError) as error:
        raise APIError(400, f"structured_outputs: {error}", code="invalid_value",
                       param="structured_outputs") from None
