"""Processed log-probabilities are computed for a sampling step that asks for them, and
only then (vLLM's real sampler, on a small batch of logits)."""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import LogitsProcessors
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.sample.sampler import Sampler

import kernels  # noqa: F401  (installs the wrapper, as the worker process does)
from kernels.lazy_logprobs import MARK

VOCAB, ROWS = 50, 3


def metadata(max_num_logprobs: int | None) -> SamplingMetadata:
    return SamplingMetadata(
        temperature=torch.ones(ROWS), all_greedy=False, all_random=True, top_p=None,
        top_k=None, generators={}, max_num_logprobs=max_num_logprobs, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=torch.zeros(ROWS),
        presence_penalties=torch.zeros(ROWS), repetition_penalties=torch.ones(ROWS),
        output_token_ids=[[] for _ in range(ROWS)], allowed_token_ids_mask=None,
        bad_words_token_ids={}, logitsprocs=LogitsProcessors())


def test_the_engine_samples_with_the_wrapper_installed():
    assert getattr(Sampler.sample, MARK, False)


def test_a_step_that_asks_for_no_logprobs_computes_none():
    sampler = Sampler(logprobs_mode="processed_logprobs")
    logits = torch.randn(ROWS, VOCAB)
    tokens, processed = sampler.sample(logits.clone(), metadata(None))
    assert processed is None
    assert tokens.shape == (ROWS,) and int(tokens.max()) < VOCAB
    assert sampler.topk_topp_sampler.logprobs_mode == "processed_logprobs"  # restored
    # vLLM's own sample, unwrapped, takes the full log-softmax all the same.
    _, unwrapped = Sampler.sample.__wrapped__(sampler, logits.clone(), metadata(None))
    assert unwrapped is not None and unwrapped.shape == (ROWS, VOCAB)


def test_a_step_that_asks_for_logprobs_gets_the_processed_ones():
    sampler = Sampler(logprobs_mode="processed_logprobs")
    logits = torch.randn(ROWS, VOCAB)
    _, processed = sampler.sample(logits.clone(), metadata(0))
    assert processed is not None
    torch.testing.assert_close(processed, logits.log_softmax(dim=-1))
