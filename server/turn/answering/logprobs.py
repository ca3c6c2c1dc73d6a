"""Log-probabilities as vLLM's APIs show them, one place for chat and completions (as
vLLM's serving classes share `OpenAIServing`'s): a token named by its text or, with
`return_tokens_as_token_ids`, as `token_id:<id>`; -inf shown as -9999.0."""

from __future__ import annotations

from typing import Any

from engine.generation import TokenLogprob

LOWEST = -9999.0  # what vLLM shows for -inf (JSON has no infinity)


def shown(logprob: float) -> float:
    return max(logprob, LOWEST)


def token_name(token_id: int, text: str, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids else text


def chat_logprob(lp: TokenLogprob, as_ids: bool = False) -> dict[str, Any]:
    """The chat API's entry for one generated token and its likeliest alternatives."""
    def one(token_id: int, text: str, logprob: float) -> dict[str, Any]:
        return {"token": token_name(token_id, text, as_ids), "logprob": shown(logprob),
                "bytes": list(text.encode())}

    return {**one(lp.token_id, lp.text, lp.logprob),
            "top_logprobs": [one(i, t, v) for i, t, v in lp.top]}


def prompt_logprobs_json(steps: list | None) -> list | None:
    """vLLM's `prompt_logprobs`: per prompt token, None for the first, else {token id:
    {logprob, rank, decoded_token}} for the token and the likeliest ones."""
    if steps is None:
        return None
    return [None if step is None else
            {str(token): {"logprob": shown(logprob), "rank": rank, "decoded_token": text}
             for token, (logprob, rank, text) in step.items()}
            for step in steps]


def completion_logprobs(tokens: list[TokenLogprob], offset: int, as_ids: bool = False
                        ) -> dict[str, list]:
    """The completions API's logprobs: tokens, their log-probabilities, where each starts in
    the text (from `offset`) and, at each step, the token and the likeliest ones."""
    starts, at = [], offset
    for lp in tokens:
        starts.append(at)
        at += len(lp.text)
    return {"text_offset": starts, "token_logprobs": [shown(lp.logprob) for lp in tokens],
            "tokens": [token_name(lp.token_id, lp.text, as_ids) for lp in tokens],
            "top_logprobs": [{token_name(i, t, as_ids): shown(v)
                              for i, t, v in ((lp.token_id, lp.text, lp.logprob), *lp.top)}
                             for lp in tokens]}


def echo_logprobs(texts: list[str], ids: list[int], steps: list | None, as_ids: bool
                  ) -> dict[str, list]:
    """The echoed prompt's part of the completions API's `logprobs` (`texts`: each id
    decoded alone; vLLM's: the first token has none)."""
    starts, at = [], 0
    for text in texts:
        starts.append(at)
        at += len(text)
    steps = steps or [None] * len(ids)
    token_logprobs, top = [], []
    for token, step in zip(ids, steps, strict=False):
        if step is None:
            token_logprobs.append(None)
            top.append(None)
            continue
        token_logprobs.append(shown(step[token][0]) if token in step else None)
        top.append({token_name(t, text or "", as_ids): shown(lp)
                    for t, (lp, _rank, text) in step.items()})
    return {"text_offset": starts, "token_logprobs": token_logprobs,
            "tokens": [token_name(t, x, as_ids) for t, x in zip(ids, texts, strict=False)],
            "top_logprobs": top}
