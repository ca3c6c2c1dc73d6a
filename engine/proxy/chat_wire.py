"""A backend through its chat route (`/v1/chat/completions`): for servers that take no
token-id prompts (cloud APIs, Ollama, LM Studio), or when asked for (`--backend-wire chat`).

The memory path builds every prompt as ChatML ids, as Qwen's templates render them:
`<|im_start|>role\\n` content `<|im_end|>\\n` a message, the hidden parts as system messages
where they go, the generation prompt last. Cut at the `<|im_start|>` and `<|im_end|>` ids
(never at text that looks like them: hidden text is encoded as data), each message goes as
{"role", "content"}, and the backend renders them with its own template. For the Qwen
family that writes the same text: both templates render a system message in the middle as
it is, a tool result as the user turn Tandem's ids already hold, a tool call as the text
of the assistant's content. The answer's text comes back and is encoded here, so the
record holds ids whose text is exactly what the backend produced; the next turn sends the
same messages again, then the new ones, and the backend's prefix cache matches as it does
for a client that resends its history.

Hidden text stays text on this wire too: the backend tokenizes the rendered messages with
its special tokens parsed, so a note's `<|im_start|>` sent as it reads would open a real
turn there. Each added token's text that the prompt holds as plain ids (data_ids) goes
with a zero-width space after its first character, which no tokenizer reads as the token;
a real turn token (an id of its own) goes as it is.

What the chat route cannot carry: the answer's own ids (encoded again from its text),
a prefilled assistant turn on a plain OpenAI API (refused), token-id biases on a model
whose tokenizer is not ours (dropped), a constraint other than a JSON schema on a plain
OpenAI API (refused; `choices` go unconstrained).
"""

from __future__ import annotations

import re
from typing import Any

from engine.backend import RequestRejected
from engine.generation import GenerationParams
from engine.proxy.dialects import Dialect, TokenReader
from engine.request_kind import RequestKind

THINKING_OFF = "<think>\n\n</think>\n\n"  # Qwen3's opening of an answer with thinking off
# Put after the first character of an added token's text that is data: the backend reads
# the two parts as text (engine path: the same split, as ids, server/turn/prompt.py).
DATA_BREAK = "\u200b"
COMPLETIONS_ONLY = ("prompt", "return_token_ids", "return_tokens_as_token_ids", "logprobs",
                    "skip_special_tokens", "stop_token_ids", "cache_prompt")


def chatml_messages(ids: list[int], im_start: int, im_end: int,
                    decode) -> tuple[list[dict[str, str]], str]:
    """The messages of a ChatML prompt, and the text the last, open turn starts with (the
    generation prompt's prefill: "" for a plain one)."""
    messages: list[dict[str, str]] = []
    opening = None
    position = 0
    while position < len(ids):
        if ids[position] != im_start:
            position += 1  # the newline between messages
            continue
        end = position + 1
        while end < len(ids) and ids[end] != im_end:
            end += 1
        role, _, content = decode(ids[position + 1:end]).partition("\n")
        if end == len(ids):  # the open turn: the generation prompt
            opening = (role, content)
            break
        if role == "assistant" and content.startswith(THINKING_OFF):
            # The template writes an empty thinking block where it writes one (Qwen3's
            # after the last question, the embedded one before every answer): sent, it
            # would be written twice.
            content = content[len(THINKING_OFF):]
        messages.append({"role": role, "content": content})
        position = end + 1
    if opening is None:
        raise RequestRejected("the prompt does not end with an open turn to answer")
    if opening[0] != "assistant":
        raise RequestRejected("the prompt's open turn is not the assistant's")
    return messages, opening[1]


class SentText:
    """Decodes ids to their text as it goes to a chat route: an added token's own id as
    its text, the text of one spelled in plain ids (a note's, a tool result's) broken by
    `DATA_BREAK`, so the backend's tokenizer does not make it the token."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        vocab = tokenizer.get_added_vocab()
        self._ids = frozenset(vocab.values())
        texts = sorted(vocab, key=len, reverse=True)  # longest first: one pass finds each
        self._texts = re.compile("|".join(re.escape(t) for t in texts) or r"(?!)")

    def __call__(self, ids: list[int]) -> str:
        parts: list[str] = []
        start = 0
        for at, token in enumerate(ids):
            if token in self._ids:
                parts += [self._broken(ids[start:at]), self._decode([token])]
                start = at + 1
        parts.append(self._broken(ids[start:]))
        return "".join(parts)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""

    def _broken(self, ids: list[int]) -> str:
        return self._texts.sub(lambda m: m.group()[:1] + DATA_BREAK + m.group()[1:],
                               self._decode(ids))


class ChatDialect(Dialect):
    """Messages to a chat route; `inner` (vLLM's, llama.cpp's or plain OpenAI's) adds the
    extensions the server takes."""

    name = "chat"
    path = "/v1/chat/completions"

    @property
    def plain(self) -> bool:
        return self.inner.plain

    @property
    def salts_cache(self) -> bool:  # vLLM's chat route takes cache_salt too
        return self.inner.salts_cache

    def __init__(self, inner: Dialect) -> None:
        super().__init__(inner.model, inner.tokens, inner.tokenizer, inner.scripted_kernels)
        self.inner = inner
        self._im_start = inner.tokenizer.convert_tokens_to_ids("<|im_start|>")
        self._decode = SentText(inner.tokenizer)

    def body(self, ids: list[int], params: GenerationParams,
             kind: RequestKind) -> dict[str, Any]:
        messages, prefill = chatml_messages(ids, self._im_start, self.tokens.end_of_turn,
                                            self._decode)
        body = self.inner.body(ids, params, kind)
        for key in COMPLETIONS_ONLY:
            body.pop(key, None)
        if self.inner.plain:  # its own tokenizer: no token-id biases
            body.pop("logit_bias", None)
            body.update(_openai_constraint(params))
        body["messages"] = messages
        if prefill == THINKING_OFF:
            if not self.inner.plain:  # a plain OpenAI API refuses the field
                body["chat_template_kwargs"] = {"enable_thinking": False}
        elif prefill:
            if self.inner.plain:
                raise RequestRejected("this backend cannot continue a started answer")
            messages.append({"role": "assistant", "content": prefill})
            body.update({"continue_final_message": True, "add_generation_prompt": False})
        return body

    def reader(self, params: GenerationParams) -> TokenReader:
        return _ChatReader(self, params)


class _ChatReader:
    """One answer's chunks: the text as it comes, encoded; the end of turn at a stop."""

    def __init__(self, dialect: ChatDialect, params: GenerationParams) -> None:
        self.dialect = dialect
        self.params = params
        self.thinking = False

    def read(self, choice: dict) -> tuple[str, list[int], list[dict[int, float]]]:
        delta = choice.get("delta") or choice.get("message") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        content = delta.get("content") or ""
        text = ""
        if reasoning:  # a server that parses thinking out: back into the answer's text
            text += ("" if self.thinking else "<think>\n") + reasoning
            self.thinking = True
        if content and self.thinking:
            text, self.thinking = text + "\n</think>\n\n", False
        text += content
        tokenizer = self.dialect.tokenizer
        ids = list(tokenizer.encode(text, add_special_tokens=False)) if text else []
        if choice.get("finish_reason") == "stop" and not self.params.stop:
            ids.append(self.dialect.tokens.end_of_turn)  # the model ended its turn
        return text, ids, []


def _openai_constraint(params: GenerationParams) -> dict[str, Any]:
    if params.script_ids is not None:
        raise RequestRejected("scripts need a backend that runs Tandem's kernels")
    if params.json_schema is not None:
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": params.json_schema}}}
    if params.any_json:
        return {"response_format": {"type": "json_object"}}
    if params.regex is not None or params.grammar is not None:
        raise RequestRejected("this backend takes no regex or grammar constraint; give a "
                              "JSON schema")
    return {}
