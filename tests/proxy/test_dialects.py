"""What proxy mode sends each backend kind for a generation, and how it reads the answer's
ids back (engine/proxy/dialects.py): pure logic; the endpoint tests (test_answers.py)
run both kinds for real."""

from __future__ import annotations

import pytest

from engine.backend import RequestRejected
from engine.generation import GenerationParams
from engine.proxy.dialects import (
    BAN_BIAS,
    LLAMA_NAMED_IDS_TOP,
    LlamaCppDialect,
    VllmDialect,
    dialect_for_owner,
    gbnf_literal,
)
from engine.special_tokens import SpecialTokens

TOKENS = SpecialTokens(end_of_turn=7, tool_call=9, tool_call_end=10, tool_response=11,
                       think=None, think_end=None)


def vllm(kernels: bool = True) -> VllmDialect:
    return VllmDialect("m", TOKENS, tokenizer=None, scripted_kernels=kernels)


def llama() -> LlamaCppDialect:
    return LlamaCppDialect("m", TOKENS, tokenizer=None)


def test_both_kinds_send_the_prompt_as_ids_and_ban_the_tool_call_in_background_work():
    for dialect in (vllm(), llama()):
        body = dialect.body([1, 2, 3], GenerationParams(max_tokens=5), "background")
        assert body["prompt"] == [1, 2, 3] and body["stream"] is True
        assert body["logit_bias"] == {"9": BAN_BIAS}
        client = dialect.body([1], GenerationParams(), "client")
        assert "9" not in client.get("logit_bias", {})


def test_vllm_is_asked_for_the_answers_ids_and_stops_at_the_end_of_turn():
    body = vllm().body([1], GenerationParams(), "client")
    assert body["return_token_ids"] is True and body["stop_token_ids"] == [7]


def test_a_script_goes_to_vllms_kernels_and_is_refused_without_them():
    body = vllm().body([1], GenerationParams(script_ids=(4, 5)), "client")
    assert body["vllm_xargs"] == {"tandem_script_ids": [4, 5, 7]}
    with pytest.raises(RequestRejected, match="kernels"):
        vllm(kernels=False).body([1], GenerationParams(script_ids=(4,)), "client")


def test_llama_cpp_always_asks_for_one_log_probability_to_learn_each_tokens_id():
    assert llama().body([1], GenerationParams(), "client")["logprobs"] == 1
    named = llama().body([1], GenerationParams(logprob_token_ids=(3, 4)), "client")
    assert named["logprobs"] == LLAMA_NAMED_IDS_TOP


def test_a_script_on_llama_cpp_is_a_grammar_of_its_ids_then_a_push_to_end_the_turn():
    body = llama().body([1], GenerationParams(script_ids=(4, 5)), "background")
    assert body["grammar"] == "root ::= <[4]> <[5]>"
    assert body["logit_bias"] == {"9": BAN_BIAS, "7": -BAN_BIAS}


def test_choices_on_llama_cpp_are_a_grammar_of_literals():
    body = llama().body([1], GenerationParams(choices=("yes", 'say "no"')), "client")
    assert body["grammar"] == 'root ::= "yes" | "say \\"no\\""'


@pytest.mark.parametrize("params, refused", [
    (GenerationParams(regex="a+"), "regex"),
    (GenerationParams(allowed_token_ids=(1, 2)), "allowed_token_ids"),
])
def test_what_llama_cpp_cannot_do_is_refused_with_the_field_named(params, refused):
    with pytest.raises(RequestRejected, match=refused):
        llama().body([1], params, "client")


def test_llama_cpps_answer_ids_and_log_probabilities_come_from_its_logprobs():
    choice = {"text": "Hi!", "logprobs": {"content": [
        {"id": 5, "logprob": -0.1, "top_logprobs": [{"id": 5, "logprob": -0.1},
                                                    {"id": 6, "logprob": -2.5}]},
        {"id": 8, "logprob": -0.3, "top_logprobs": [{"id": 8, "logprob": -0.3}]}]}}
    assert llama().answer_ids(choice) == [5, 8]
    assert llama().logprob_steps(choice) == [{5: -0.1, 6: -2.5}, {8: -0.3}]
    assert llama().answer_ids({"text": "", "logprobs": None}) == []


def test_vllms_log_probabilities_are_keyed_by_token_id():
    choice = {"token_ids": [5], "logprobs": {"top_logprobs": [{"token_id:5": -0.1,
                                                               "token_id:6": -2.0}]}}
    assert vllm().answer_ids(choice) == [5]
    assert vllm().logprob_steps(choice) == [{5: -0.1, 6: -2.0}]


def test_a_gbnf_literal_escapes_quotes_backslashes_and_newlines():
    assert gbnf_literal('a "b"\\\nc') == '"a \\"b\\"\\\\\\nc"'


@pytest.mark.parametrize("owner, kind", [("vllm", "vllm"), ("llamacpp", "llama.cpp"),
                                         ("openai", None), (None, None)])
def test_the_backend_kind_is_read_from_its_models_owner(owner, kind):
    assert dialect_for_owner(owner) == kind
