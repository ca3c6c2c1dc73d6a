"""How one backend kind speaks `/v1/completions` with token-id prompts: the request body a
generation becomes, and where its answer's ids and log-probabilities are in a chunk.

Both kinds take `prompt` as a list of ids and keep a prefix cache over them, and both end
a stream with OpenAI's usage chunk (`prompt_tokens_details.cached_tokens`); they differ in
the extensions:

- the answer's ids: vLLM returns them (`return_token_ids`); llama.cpp gives each token's id
  with its log-probability (`logprobs.content[].id`), so at least one is always asked for;
- log-probabilities: vLLM keys them `token_id:N` (`return_tokens_as_token_ids`); llama.cpp
  names ids, the likeliest N only, so named ids (`logprob_token_ids`) are looked up in
  its top 20;
- a constrained answer: vLLM's `structured_outputs` (choice, json, regex, grammar);
  llama.cpp's `json_schema` and `grammar` (GBNF), and no regex;
- a scripted answer (tests): `vllm_xargs` to Tandem's kernels; on llama.cpp a grammar
  whose one sentence is the script's ids (`<[id]>`), and a bias to end the turn after it;
- a user's own cache: vLLM's `cache_salt`; llama.cpp and a plain OpenAI API have none
  (`salts_cache` False: their users share one cache, so the engine serves one user on
  them unless told otherwise, http_backend.py);
- sampling only among ids: vLLM's `allowed_token_ids`; llama.cpp refuses it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from engine.backend import RequestRejected
from engine.generation import GenerationParams, structured_fields
from engine.request_kind import RequestKind
from engine.special_tokens import SpecialTokens

BAN_BIAS = -100.0  # OpenAI's floor for logit_bias: the token is never sampled
LLAMA_NAMED_IDS_TOP = 20  # llama.cpp reports the likeliest N: named ids are found there


class TokenReader(Protocol):
    def read(self, choice: dict) -> tuple[str, list[int], list[dict[int, float]]]:
        """A chunk's choice: its new text, ids and log-probabilities (one a token)."""
        ...


class Dialect:
    """What every kind shares: OpenAI's completions fields (alone: a plain OpenAI API,
    served through its chat route, chat_wire.py)."""

    name = "openai"
    path = "/v1/completions"
    # A plain OpenAI API: its own tokenizer (no token-id biases), no grammar, none of a
    # server's extensions (template switches, continuing an answer).
    plain = True
    # The backend keeps each user's prefix cache apart (`cache_salt`): without it, how
    # much of a prompt was cached tells one user what another sent.
    salts_cache = False

    def __init__(self, model: str, tokens: SpecialTokens, tokenizer,
                 scripted_kernels: bool = False) -> None:
        self.model = model
        self.tokens = tokens
        self.tokenizer = tokenizer
        self.scripted_kernels = scripted_kernels  # a vLLM backend that runs Tandem's kernels

    def body(self, ids: list[int], params: GenerationParams,
             kind: RequestKind) -> dict[str, Any]:
        """The completions request for one generation, GenerationParams field by field."""
        body: dict[str, Any] = {
            "model": self.model, "prompt": list(ids), "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": params.max_tokens,
            "temperature": params.temperature, "top_p": params.top_p,
            "stop": list(params.stop), "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        bias = {str(token): value for token, value in params.logit_bias}
        ban = params.ban_tool_call if params.ban_tool_call is not None else kind == "background"
        if ban and self.tokens.tool_call is not None:
            bias[str(self.tokens.tool_call)] = BAN_BIAS
        if bias:
            body["logit_bias"] = bias
        return body

    def reader(self, params: GenerationParams) -> TokenReader:
        """Reads one answer's chunks (a chat route's reader keeps state across them)."""
        return self

    def read(self, choice: dict) -> tuple[str, list[int], list[dict[int, float]]]:
        return choice.get("text") or "", self.answer_ids(choice), self.logprob_steps(choice)

    def answer_ids(self, choice: dict) -> list[int]:
        return list(choice.get("token_ids") or [])

    def logprob_steps(self, choice: dict) -> list[dict[int, float]]:
        """A chunk's log-probabilities, one {token id: log-probability} a new token."""
        return []


class VllmDialect(Dialect):
    name = "vllm"
    plain = False
    salts_cache = True

    def body(self, ids: list[int], params: GenerationParams,
             kind: RequestKind) -> dict[str, Any]:
        body = super().body(ids, params, kind)
        body.update({"return_token_ids": True,
                     "return_tokens_as_token_ids": True,  # log-probabilities keyed by id
                     "stop_token_ids": [self.tokens.end_of_turn],
                     "skip_special_tokens": True})
        optional = {"top_k": params.top_k if params.top_k > 0 else None,
                    "min_p": params.min_p or None,
                    "repetition_penalty": params.repetition_penalty
                    if params.repetition_penalty != 1.0 else None,
                    "min_tokens": params.min_tokens or None, "cache_salt": params.cache_salt,
                    "allowed_token_ids": list(params.allowed_token_ids)
                    if params.allowed_token_ids else None,
                    # named ids are reported in place of the likeliest N, as in-process
                    "logprobs": 0 if params.logprob_token_ids else params.top_logprobs,
                    "logprob_token_ids": list(params.logprob_token_ids)
                    if params.logprob_token_ids else None,
                    "structured_outputs": structured_fields(params)}
        body.update({k: v for k, v in optional.items() if v is not None})
        if params.script_ids is not None:
            if not self.scripted_kernels:
                raise RequestRejected("scripts need a backend that runs Tandem's kernels")
            body["vllm_xargs"] = {"tandem_script_ids": [*params.script_ids,
                                                        self.tokens.end_of_turn]}
        return body

    def logprob_steps(self, choice: dict) -> list[dict[int, float]]:
        # the keys are `token_id:N`: the request asks for ids, not text
        logprobs = choice.get("logprobs") or {}
        return [{int(key.rsplit(":", 1)[1]): value for key, value in (step or {}).items()
                 if key.startswith("token_id:")}
                for step in logprobs.get("top_logprobs") or []]


class LlamaCppDialect(Dialect):
    name = "llama.cpp"
    plain = False

    def body(self, ids: list[int], params: GenerationParams,
             kind: RequestKind) -> dict[str, Any]:
        if params.regex is not None:
            raise RequestRejected("this backend (llama.cpp) takes no regex constraint; "
                                  "give a grammar (GBNF) or a JSON schema")
        if params.allowed_token_ids:
            raise RequestRejected("this backend (llama.cpp) takes no allowed_token_ids")
        body = super().body(ids, params, kind)
        top = params.top_logprobs or 0
        if params.logprob_token_ids:
            top = max(top, LLAMA_NAMED_IDS_TOP)
        # each token's id comes with its log-probability: at least one is always asked for
        body.update({"logprobs": max(top, 1), "cache_prompt": True})
        optional = {"top_k": params.top_k if params.top_k > 0 else 0,
                    "min_p": params.min_p,
                    "repeat_penalty": params.repetition_penalty}
        body.update(optional)
        body.update(self._constraint(params))
        if params.script_ids is not None:
            # A grammar that ends in an end-of-generation token fails in llama.cpp; past
            # the grammar only those are allowed, and the bias picks the end of turn.
            body.setdefault("logit_bias", {})[str(self.tokens.end_of_turn)] = -BAN_BIAS
        return body

    def _constraint(self, params: GenerationParams) -> dict[str, Any]:
        if params.script_ids is not None:  # the script's ids (then the end of turn: below)
            return {"grammar": "root ::= " + " ".join(f"<[{t}]>" for t in params.script_ids)}
        if params.choices:
            return {"grammar": "root ::= " + " | ".join(gbnf_literal(c) for c in params.choices)}
        if params.json_schema is not None:
            return {"json_schema": params.json_schema}
        if params.grammar is not None:
            return {"grammar": params.grammar}
        if params.any_json:
            return {"json_schema": {"type": "object"}}
        return {}

    def answer_ids(self, choice: dict) -> list[int]:
        content = (choice.get("logprobs") or {}).get("content") or []
        return [int(step["id"]) for step in content if isinstance(step, dict) and "id" in step]

    def logprob_steps(self, choice: dict) -> list[dict[int, float]]:
        content = (choice.get("logprobs") or {}).get("content") or []
        return [{int(t["id"]): float(t["logprob"]) for t in step.get("top_logprobs") or []
                 if "id" in t} for step in content if isinstance(step, dict)]


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal (llama.cpp's grammar syntax)."""
    escaped = json.dumps(text, ensure_ascii=False)[1:-1]  # \\ \" \n \t and \uXXXX controls
    return f'"{escaped}"'


DIALECTS = {dialect.name: dialect for dialect in (Dialect, VllmDialect, LlamaCppDialect)}


def dialect_for_owner(owned_by: str | None) -> str | None:
    """The dialect a backend's `/v1/models` entry names (`owned_by`), or None."""
    return {"vllm": "vllm", "llamacpp": "llama.cpp"}.get((owned_by or "").lower())
