"""Beam search over any engine, as vLLM's API server runs it (`use_beam_search`): each step
is one single-token generation a beam, asked for its 2 x width likeliest next tokens; the
width best continuations go on, a beam that writes the end of turn is complete.

The prefix cache holds each beam's prompt, so a step prefills one token a beam.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from engine.backend import EngineBackend
from engine.generation import GenerationParams


@dataclass
class Beam:
    token_ids: list[int] = field(default_factory=list)  # generated, the end of turn left out
    cum_logprob: float = 0.0
    finish_reason: str = "length"
    stop_reason: int | None = None
    text: str = ""


def beam_score(beam: Beam, length_penalty: float, prompt_tokens: int) -> float:
    """vLLM's (and Hugging Face's) ranking: the sum of log-probabilities over the sequence's
    length (prompt included, the end of turn not) raised to the penalty."""
    return beam.cum_logprob / (max(prompt_tokens + len(beam.token_ids), 1) ** length_penalty)


async def beam_search(engine: EngineBackend, prompt_ids: list[int], width: int,
                      max_tokens: int, request_id: str, temperature: float = 0.0,
                      length_penalty: float = 1.0,
                      cache_salt: str | None = None) -> list[Beam]:
    """The `width` best beams, best first, their text decoded."""
    end = engine.tokens.end_of_turn
    step_params = GenerationParams(max_tokens=1, temperature=temperature,
                                   top_logprobs=2 * width, ban_tool_call=False,
                                   cache_salt=cache_salt)
    beams, complete = [Beam()], []
    for step in range(max_tokens):
        nexts = await asyncio.gather(*(
            _next_tokens(engine, prompt_ids + beam.token_ids, step_params,
                         f"{request_id}-step{step}-beam{i}")
            for i, beam in enumerate(beams)))
        candidates = []
        for beam, options in zip(beams, nexts, strict=True):
            for token_id, logprob in options:
                grown = Beam([*beam.token_ids, token_id], beam.cum_logprob + logprob)
                if token_id == end:
                    complete.append(Beam(beam.token_ids, grown.cum_logprob, "stop", end))
                else:
                    candidates.append(grown)
        beams = sorted(candidates, key=lambda b: b.cum_logprob, reverse=True)[:width]
        if not beams:
            break
    best = sorted([*complete, *beams], key=lambda b: beam_score(b, length_penalty, len(prompt_ids)),
                  reverse=True)[:width]
    for beam in best:
        beam.text = engine.tokenizer.decode(beam.token_ids, skip_special_tokens=True)
    return best


async def _next_tokens(engine: EngineBackend, ids: list[int], params: GenerationParams,
                       request_id: str) -> list[tuple[int, float]]:
    """The likeliest next tokens after `ids`, with their log-probabilities."""
    options: dict[int, float] = {}
    async for delta in engine.generate(ids, params, request_id=request_id):
        for step in delta.token_logprobs:
            options.update({token: logprob for token, _, logprob in step.top})
            options.setdefault(step.token_id, step.logprob)
    return list(options.items())
