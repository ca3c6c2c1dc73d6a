"""The turn's engine parameters: the request's sampling fields with vLLM's defaults, the
answer's room, the user's prefix-cache salt and the answer's constraint."""

from __future__ import annotations

from engine.backend import EngineBackend
from engine.generation import GenerationParams
from engine.profiles import Profile
from server.http.schema import ChatCompletionRequest
from server.turn.checks import AnswerConstraints
from server.turn.constraints.structured import structured_params
from server.turn.script_file import script_from_file

DEFAULT_TEMPERATURE = 0.7


def script_ids(engine: EngineBackend,
               request: ChatCompletionRequest) -> tuple[tuple[int, ...] | None, ...]:
    """Scripted profiles: each generation's forced ids (None: the model writes it); a
    request without `script` may take one from the tests' script file (script_file.py)."""
    script = request.script
    if script is None and engine.profile.scripted:
        script = script_from_file(request)
    scripts = [script] if isinstance(script, str) else script or []
    encode = engine.tokenizer.encode
    return tuple(None if s is None else tuple(encode(s, add_special_tokens=False))
                 for s in scripts)


def generation_params(request: ChatCompletionRequest, profile: Profile, room: int,
                      constraints: AnswerConstraints, cache_salt: str,
                      first_script: tuple[int, ...] | None) -> GenerationParams:
    """The first generation's parameters; `room`: what the prompt leaves of the context."""
    max_tokens = request.requested_max_tokens()
    structured = constraints.structured
    return GenerationParams(
        max_tokens=min(max_tokens, room) if max_tokens
        else min(room, profile.default_max_tokens or room),
        temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k is None else request.top_k,
        seed=request.seed,
        stop=request.stops(),
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=request.repetition_penalty or 1.0,
        min_p=request.min_p or 0.0,
        logit_bias=tuple((int(t), b) for t, b in (request.logit_bias or {}).items()),
        script_ids=first_script,
        top_logprobs=(request.top_logprobs or 0) if request.logprobs else None,
        logprob_token_ids=tuple(request.logprob_token_ids or ()) or None,
        allowed_token_ids=tuple(request.allowed_token_ids or ()) or None,
        thinking_token_budget=None if request.thinking_token_budget in (None, -1)
        else request.thinking_token_budget,
        cache_salt=cache_salt,
        min_tokens=request.min_tokens,
        prompt_logprobs=request.prompt_logprobs,
        **(structured_params(structured) if structured is not None else
           {"json_schema": constraints.forced.schema if constraints.forced is not None
            else constraints.answer_json}),
    )
