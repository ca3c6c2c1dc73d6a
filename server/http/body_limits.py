"""How large a model route's body may be: refused before any step that costs CPU in
proportion to it (parsing into the request model, rendering, tokenizing).

Two limits, both checked on the parsed JSON in one walk:

* **Text**: all the body's strings together may hold at most `max_model_len` times the
  longest token's length in characters (per prompt, for the routes that take a batch).
  No token stands for more characters than the vocabulary's longest, so a longer text is
  more tokens than the context holds: it could never be served, and is refused as
  `context_length_exceeded` without being tokenized.
* **Structure**: at most `MAX_STRUCTURE` objects, arrays and object keys together (a
  message is three or four; a long agent conversation with its tools a few tens of
  thousands). Parsing these into the request model holds the interpreter; the bound keeps
  it to tens of milliseconds, so one request cannot stall the others.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from engine.backend import EngineBackend
from server.http.errors import APIError

MAX_STRUCTURE = 65_536


@dataclass(frozen=True)
class BodyLimits:
    max_chars: int
    max_structure: int = MAX_STRUCTURE

    def __call__(self, body: Any) -> None:
        """Refuse a parsed body past either limit (APIError); walks it once, without
        recursion (the parser has bounded its depth already)."""
        chars = structure = 0
        stack = [body]
        while stack:
            value = stack.pop()
            if isinstance(value, str):
                chars += len(value)
            elif isinstance(value, dict):
                structure += 1 + len(value)
                for key, item in value.items():
                    chars += len(key)
                    stack.append(item)
            elif isinstance(value, list):
                structure += 1
                stack.extend(value)
            if structure > self.max_structure:
                raise APIError(400, f"the request has more than {self.max_structure:,} "
                               "JSON objects, arrays and keys: more than a prompt this "
                               "server reads", code="request_too_large")
        if chars > self.max_chars:
            raise APIError(400, f"the request's text is {chars:,} characters, more than "
                           f"the {self.max_chars:,} its prompt can hold (this model's "
                           "context times the longest token's characters)",
                           code="context_length_exceeded")


_longest: dict[int, int] = {}
_lock = threading.Lock()


def longest_token_chars(tokenizer) -> int:
    """The most characters one token stands for (an upper bound: a byte-level token's
    string has one character a byte, and a byte is at most one character of text)."""
    key = id(tokenizer)
    with _lock:
        if key not in _longest:
            _longest[key] = max(map(len, tokenizer.get_vocab()), default=1)
        return _longest[key]


def body_limits(engine: EngineBackend, prompts: int = 1) -> BodyLimits:
    """The limits of a body for `engine`'s model; `prompts`: how many prompts the route
    takes in one body (a batch)."""
    per_prompt = engine.profile.max_model_len * longest_token_chars(engine.tokenizer)
    return BodyLimits(max_chars=per_prompt * prompts)
