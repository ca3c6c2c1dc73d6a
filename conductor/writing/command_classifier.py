"""The learned fall-back of the command recogniser (issue 60; profile
`memory.command_recogniser: learned`, the rules alone by default): when the rules of
`commands.py` find no command, a logistic regression over the message's hashed character
and word n-grams may, at the threshold chosen by `python -m bench.commands.learned`.

No generative model: a linear layer over counted n-grams, 0.1 ms a message. Its weights
(`command_classifier.npz`) are fitted on the bench's three earlier labelled sets by
`python -m bench.commands.learned --export`. On the set never tuned on it lifts the rules
from writes precision 0.850 / recall 0.667 to 0.863 / 0.804 (bench/README.md); short of
the goal either way, so the rules stay the default.

A command it finds carries the user's opening paragraph as written (tidied, never
paraphrased): the rules' patterns, which cut the fact out of "remember that ...", found
none to cut.
"""

from __future__ import annotations

import re
import threading
import zlib
from pathlib import Path

import numpy as np

from conductor.writing.commands import _QUOTE_OR_CODE as QUOTE_OR_CODE
from conductor.writing.commands import MAX_FACT_CHARS, Command, recognise
from conductor.writing.commands import _clean as clean
from conductor.writing.commands import _first_paragraph as first_paragraph

KINDS = ("none", "remember", "forget", "recall", "update")
HASH_DIMS = 1 << 14  # 16,384 buckets: few collisions among ~700 short messages' n-grams
CHAR_NS = (2, 3, 4, 5)
MAX_CHARS = 400  # a command opens the message; its tail adds only noise
WEIGHTS = Path(__file__).with_name("command_classifier.npz")


def _grams(text: str) -> list[str]:
    """Character n-grams inside words (padded with spaces) and word unigrams and bigrams,
    of the lowercased opening: spelling ("rember", "覚えて"), inflection and word order."""
    text = " ".join(text.lower()[:MAX_CHARS].split())
    out: list[str] = []
    for word in text.split(" "):
        padded = f" {word} "
        for n in CHAR_NS:
            out += [padded[i:i + n] for i in range(max(1, len(padded) - n + 1))]
    words = re.findall(r"\w+|[^\w\s]", text)
    out += ["w:" + w for w in words]
    out += ["b:" + a + " " + b for a, b in zip(words, words[1:], strict=False)]
    out.append("first:" + (words[0] if words else ""))
    return out


def ngram_features(texts: list[str]) -> np.ndarray:
    """One row a text: log(1 + count) of each hashed n-gram, L2-normalised. crc32, not
    Python's salted `hash`, so a bucket is the same in every process."""
    rows = np.zeros((len(texts), HASH_DIMS), dtype=np.float32)
    for row, text in enumerate(texts):
        for gram in _grams(text):
            rows[row, zlib.crc32(gram.encode()) % HASH_DIMS] += 1.0
    rows = np.log1p(rows)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, 1e-9)


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


_model: tuple[np.ndarray, np.ndarray, float] | None = None
_model_lock = threading.Lock()


def _weights() -> tuple[np.ndarray, np.ndarray, float]:
    """(weights, bias, threshold), read once a process."""
    global _model
    with _model_lock:
        if _model is None:
            with np.load(WEIGHTS) as saved:
                _model = (saved["weights"].astype(np.float32),
                          saved["bias"].astype(np.float32), float(saved["threshold"]))
        return _model


def recognise_learned(message: str) -> Command | None:
    """The rules' command, else the classifier's when it is sure enough."""
    found = recognise(message)
    if found is not None or not message or QUOTE_OR_CODE.match(message):
        return found
    opening = first_paragraph(message)
    weights, bias, threshold = _weights()
    p = softmax(ngram_features([opening]) @ weights + bias)[0]
    best = 1 + int(np.argmax(p[1:]))  # the likeliest command (KINDS[0] is none)
    text = clean(opening)
    if p[best] < threshold or not text or len(text) > MAX_FACT_CHARS:
        return None
    return Command(KINDS[best], text)  # type: ignore[arg-type]  (a CommandKind)
