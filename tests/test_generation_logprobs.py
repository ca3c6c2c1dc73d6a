"""How the engine's per-step log-probabilities become each token's TokenLogprob: the N
likeliest, every one reported for named ids, the whole vocabulary for -1 (a unit test of
engine/generation.py on vLLM's shape: {token id: Logprob(logprob, rank, decoded_token)})."""

from __future__ import annotations

from types import SimpleNamespace

from engine.generation import GenerationParams, token_logprobs

STEP = {7: SimpleNamespace(logprob=-0.5, rank=1, decoded_token="a"),
        9: SimpleNamespace(logprob=-1.5, rank=2, decoded_token="b"),
        4: SimpleNamespace(logprob=-3.0, rank=3, decoded_token="c"),
        2: SimpleNamespace(logprob=-9.0, rank=40, decoded_token="d")}


def tops(**params) -> list[int]:
    (token,) = token_logprobs([7], [STEP], GenerationParams(**params))
    return [token_id for token_id, _, _ in token.top]


def test_the_likeliest_n_are_kept_in_rank_order():
    assert tops(top_logprobs=2) == [7, 9]
    assert tops(top_logprobs=0) == []


def test_the_whole_vocabulary_and_named_ids_keep_every_reported_token():
    assert tops(top_logprobs=-1) == [7, 9, 4, 2]
    assert tops(top_logprobs=0, logprob_token_ids=(2, 4)) == [7, 9, 4, 2]
