"""The turn's first step: is this request one the served profile can take?

Everything here is decided from the request and the profile alone, before memory is
looked at; each refusal is a 4xx that names the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.backend import EngineBackend
from engine.profiles import Profile
from server.http.errors import APIError
from server.http.schema import ChatCompletionRequest
from server.turn.constraints.response_format import answer_schema
from server.turn.constraints.structured import check_structured
from server.turn.constraints.tool_choice import ForcedChoice, forced_choice
from server.turn.memory import MEMORY_HEADER, memory_switch
from server.turn.tool_exchange import template_shows_tools


def model_names(profile: Profile) -> set[str]:
    """Names a request may use for this server's model: the profile name, the model and
    the served names."""
    return {profile.name, profile.model, profile.model.removeprefix("builtin:"),
            *profile.served_names}


class ContextOverflow(APIError):
    """The prompt leaves less room than the answer needs (`prompt_tokens` says how long)."""

    def __init__(self, message: str, param: str, prompt_tokens: int) -> None:
        super().__init__(400, message, code="context_length_exceeded", param=param)
        self.prompt_tokens = prompt_tokens


@dataclass(frozen=True)
class AnswerConstraints:
    """What holds the answer to a shape: a forced tool call, a JSON answer
    (`response_format`) or vLLM's `structured_outputs`; at most one of the first two."""

    forced: ForcedChoice | None
    answer_json: dict[str, Any] | None
    structured: Any  # the request's StructuredOutputs, checked

    @property
    def json_answer(self) -> bool:
        return self.answer_json is not None or self.structured is not None


def check_request(engine: EngineBackend, profile: Profile, request: ChatCompletionRequest,
                  headers) -> AnswerConstraints:
    """APIError when the request cannot be served as asked; else the answer's constraints."""
    if request.model is not None and request.model not in model_names(profile):
        raise APIError(404, f"model {request.model!r} does not exist; this server serves "
                       f"{profile.name!r}", code="model_not_found", param="model")
    if request.script is not None and not profile.scripted:
        raise APIError(400, f"'script' is only accepted by scripted profiles; {profile.name!r} "
                       "is not one", code="invalid_value", param="script")
    check_tools(engine, profile, request)
    memory_switch(headers.get(MEMORY_HEADER))
    check_token_ids(engine, "logit_bias", [int(token) for token in request.logit_bias or {}])
    check_token_ids(engine, "logprob_token_ids", request.logprob_token_ids or [])
    check_token_ids(engine, "allowed_token_ids", request.allowed_token_ids or [])
    check_logprobs(engine, profile, "top_logprobs", request.top_logprobs)
    check_logprobs(engine, profile, "prompt_logprobs", request.prompt_logprobs)
    if request.thinking_token_budget not in (None, -1) and engine.tokens.think is None:
        raise APIError(400, "thinking_token_budget: this model has no <think> token",
                       code="invalid_value", param="thinking_token_budget")
    forced = forced_choice(request)
    answer_json = answer_schema(request)
    structured = request.structured_outputs
    if structured is not None:
        check_structured(structured)
    if answer_json is not None and forced is not None:
        raise APIError(400, "response_format and a tool_choice that forces a call cannot both "
                       "hold: the answer is either the call or the JSON",
                       code="invalid_value", param="response_format")
    return AnswerConstraints(forced, answer_json, structured)


def check_tools(engine: EngineBackend, profile: Profile,
                request: ChatCompletionRequest) -> None:
    """A 400 for `tools` the model may call as it likes (`tool_choice` auto) on a profile
    where no call can come: its chat template shows the model no tools, or its
    `tool_call_format` is none (no call the model writes is read as one). Accepted, they
    would be left out and an agent would wait for a call for ever. A forced call (the
    server writes it from the tool's schema) and `tool_choice: none` need neither."""
    if not request.tools or request.tool_choice not in (None, "auto"):
        return
    if not template_shows_tools(engine.tokenizer):
        why = "its chat template has no tool section: the model would never see the tools"
    elif profile.tool_call_format == "none":
        why = "its tool_call_format is none: no call the model writes is read as one"
    else:
        return
    raise APIError(400, f"tools: profile {profile.name!r} cannot take tools ({why}); send "
                   "tool_choice 'none', force a call with tool_choice 'required' or a named "
                   "function, or serve a profile whose model calls tools (chat, coding)",
                   code="invalid_value", param="tools")


def check_token_ids(engine: EngineBackend, param: str, ids: list[int]) -> None:
    """A 400 naming `param` when an id is not the served model's."""
    vocabulary = len(engine.tokenizer)
    if any(not 0 <= token < vocabulary for token in ids):
        raise APIError(400, f"{param}: token ids are from 0 to {vocabulary - 1}",
                       code="invalid_value", param=param)


def check_logprobs(engine: EngineBackend, profile: Profile, param: str,
                   asked: int | None) -> None:
    """A 400 for more log-probabilities a token than the server gives (vLLM's
    --max-logprobs, the profile's `max_logprobs`); -1 asks for the whole vocabulary."""
    if asked is None:
        return
    vocabulary = len(engine.tokenizer)
    limit = vocabulary if profile.max_logprobs == -1 else profile.max_logprobs
    wanted = vocabulary if asked == -1 else asked
    if wanted > limit:
        raise APIError(400, f"{param}: at most {limit} a token on this server "
                       "(tandem serve --max-logprobs N; -1 for the whole vocabulary)",
                       code="invalid_value", param=param)


def check_room(prompt_tokens: int, max_model_len: int, answer_room: int) -> int:
    """The room the prompt leaves for the answer; ContextOverflow when too little. A
    max_tokens past the room is not refused: the answer gets the room (vLLM's
    get_max_tokens), as agents that ask for 32,000 tokens on any model expect."""
    room = max_model_len - prompt_tokens
    if room < answer_room:
        raise ContextOverflow(f"the prompt is {prompt_tokens} tokens; this model's context is "
                              f"{max_model_len} tokens", "messages", prompt_tokens)
    return room
