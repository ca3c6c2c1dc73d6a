"""Processed log-probabilities only for a sampling step that asks for them.

The engine runs vLLM with `logprobs_mode="processed_logprobs"`: the writer's gate and a
scripted answer read the odds the sampler saw (after the scripted driver, the tool-call ban
and the grammar). In that mode vLLM's top-k/top-p sampler takes a log-softmax over the whole
vocabulary at every step that samples at a temperature, whether or not any request wants
log-probabilities: measured on the tiny profile with 32 clients sampling, a quarter of the
wall time. Installed where vLLM loads these logits processors (the worker process), this
lets such a step sample as `raw_logprobs` mode does, computing nothing it throws away; a
step with a request that asks for log-probabilities is unchanged.
"""

from __future__ import annotations

from typing import Any

MARK = "_tandem_lazy_logprobs"


def wants_logprobs(metadata: Any) -> bool:
    return metadata.max_num_logprobs is not None or bool(metadata.logprob_token_ids)


def install() -> None:
    """Wrap vLLM's `Sampler.sample` (once a process)."""
    from vllm.v1.sample.sampler import Sampler

    original = Sampler.sample
    if getattr(original, MARK, False):
        return

    def sample(self, logits, sampling_metadata, *args, **kwargs):
        sampler = self.topk_topp_sampler
        if wants_logprobs(sampling_metadata) or sampler.logprobs_mode == "raw_logprobs":
            return original(self, logits, sampling_metadata, *args, **kwargs)
        mode = sampler.logprobs_mode
        sampler.logprobs_mode = "raw_logprobs"  # the engine core steps one batch at a time
        try:
            return original(self, logits, sampling_metadata, *args, **kwargs)
        finally:
            sampler.logprobs_mode = mode

    setattr(sample, MARK, True)
    sample.__wrapped__ = original
    Sampler.sample = sample
