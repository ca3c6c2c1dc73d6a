"""What one generation is asked for (GenerationParams) and what it streams back (Delta),
and the translation of both to and from vLLM's SamplingParams and outputs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.stats import RequestTimings


@dataclass(frozen=True)
class GenerationParams:
    """What a caller may ask of one generation; the engine turns it into SamplingParams."""

    max_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_p: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias): OpenAI's logit_bias
    script_ids: tuple[int, ...] | None = None  # scripted profiles only: force these ids
    ban_tool_call: bool | None = None  # default: on for background, off for client
    choices: tuple[str, ...] | None = None  # constrain the answer to one of these (xgrammar)
    json_schema: dict | None = None  # or to JSON under this schema (xgrammar)
    regex: str | None = None  # or to match this regular expression
    grammar: str | None = None  # or to this EBNF grammar
    any_json: bool = False  # or to any JSON object
    min_tokens: int = 0  # end of turn and stop strings wait until this many are generated
    prompt_logprobs: int | None = None  # each prompt token's log-probability and the N likeliest
    logprob_token_ids: tuple[int, ...] | None = None  # report these ids' log-probabilities
    allowed_token_ids: tuple[int, ...] | None = None  # sample only among these ids
    # At most this many tokens inside <think>...</think>, then </think> is forced (vLLM's
    # thinking_token_budget; the engine counts from the last <think>, the prompt's too).
    thinking_token_budget: int | None = None
    top_logprobs: int | None = None  # each new token's log-probability and the N likeliest
    # (-1 in either: the whole vocabulary)
    # vLLM's per-request prefix-cache salt: requests share cached blocks only with requests
    # of the same salt (the server gives each user one, so cached_tokens tells nobody what
    # another user's prompts held).
    cache_salt: str | None = None
    # A client request that can wait (a background response): interactive requests are
    # scheduled first and take its slot when none is free; it resumes where it was.
    deferred: bool = False


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability and the likeliest tokens at its step."""

    token_id: int
    text: str
    logprob: float
    top: tuple[tuple[int, str, float], ...]  # (id, text, logprob), likeliest first


@dataclass
class Delta:
    """One streamed step of a generation: new text and ids, and at the end the totals."""

    request_id: str
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # the stop string (or token id) that ended it
    prompt_tokens: int = 0
    cached_tokens: int = 0
    timings: RequestTimings | None = None
    # Per new token: {token id: log-probability} for GenerationParams.logprob_token_ids,
    # after the logits processors and the grammar (what the sampler chose from).
    logprobs: list[dict[int, float]] = field(default_factory=list)
    # GenerationParams.top_logprobs: one a new token.
    token_logprobs: list[TokenLogprob] = field(default_factory=list)
    # GenerationParams.prompt_logprobs, on the first delta: per prompt token (None for the
    # first), {token id: (log-probability, rank, text)} for the token and the N likeliest.
    prompt_logprobs: list[dict[int, tuple[float, int | None, str | None]] | None] | None = None


def close_timings(delta: Delta, timings: RequestTimings, stats) -> None:
    """A generation's last delta: its timings completed, handed to it and to the engine's
    statistics (`EngineStats`)."""
    timings.finished_at = time.perf_counter()
    timings.cached_tokens = delta.cached_tokens
    timings.finish_reason = delta.finish_reason
    delta.timings = timings
    stats.finished(timings)


def structured_fields(params: GenerationParams) -> dict | None:
    """The constraint as vLLM's `structured_outputs` fields (one of them), or None: for
    the engine's StructuredOutputsParams and for a vLLM backend's request body alike."""
    if params.choices:
        return {"choice": list(params.choices)}
    if params.json_schema is not None:
        return {"json": params.json_schema}
    if params.regex is not None:
        return {"regex": params.regex}
    if params.grammar is not None:
        return {"grammar": params.grammar}
    if params.any_json:
        return {"json_object": True}
    return None


def structured_outputs(params: GenerationParams):
    from vllm.sampling_params import StructuredOutputsParams

    fields = structured_fields(params)
    return StructuredOutputsParams(**fields) if fields is not None else None


def prompt_logprobs(steps) -> list[dict[int, tuple[float, int | None, str | None]] | None]:
    return [None if step is None else
            {t: (lp.logprob, lp.rank, lp.decoded_token) for t, lp in step.items()}
            for step in steps]


def token_logprobs(ids: list[int], steps, params: GenerationParams) -> list[TokenLogprob]:
    """vLLM's per-step {id: Logprob} as TokenLogprob, the sampled token first."""
    out = []
    for token, step in zip(ids, steps or (), strict=False):
        ranked = sorted(step.items(), key=lambda item: item[1].rank or 0)
        # named ids (logprob_token_ids): every id the step reports, the sampled one with them
        top = tuple((t, lp.decoded_token or "", lp.logprob) for t, lp in ranked
                    if params.logprob_token_ids or params.top_logprobs == -1
                    or (lp.rank is not None and lp.rank <= (params.top_logprobs or 0)))
        mine = step.get(token)
        out.append(TokenLogprob(token, mine.decoded_token or "" if mine else "",
                                mine.logprob if mine else float("-inf"), top))
    return out
