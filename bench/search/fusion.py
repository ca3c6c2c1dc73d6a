"""Fusion rules over a dense and a sparse ranking, in Python, so that many rules can be
scored on the same rankings (one search a query and mode, not one a rule).

A ranking is a list of (key, score), best first. `RRF` is Qdrant's reciprocal rank
fusion (weight / (k + rank), ranks from 0), `DBSF` Qdrant's distribution-based score
fusion (each list's scores mapped by mean +- 3 standard deviations to 0..1, then summed,
weighted), `MinMax` a weighted sum of min-max normalised scores.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable
from dataclasses import dataclass

Ranking = list[tuple[Hashable, float]]


@dataclass(frozen=True)
class RRF:
    k: float
    dense_weight: float = 1.0

    @property
    def name(self) -> str:
        return f"rrf k={self.k:g} dense x{self.dense_weight:g}"

    def fuse(self, dense: Ranking, sparse: Ranking) -> list[Hashable]:
        scores: dict[Hashable, float] = {}
        for weight, ranking in ((self.dense_weight, dense), (1.0, sparse)):
            for rank, (key, _) in enumerate(ranking):
                scores[key] = scores.get(key, 0.0) + weight / (self.k + rank)
        return _ordered(scores)


@dataclass(frozen=True)
class DBSF:
    dense_weight: float = 1.0

    @property
    def name(self) -> str:
        return f"dbsf dense x{self.dense_weight:g}"

    def fuse(self, dense: Ranking, sparse: Ranking) -> list[Hashable]:
        scores: dict[Hashable, float] = {}
        for weight, ranking in ((self.dense_weight, dense), (1.0, sparse)):
            for key, value in _spread(ranking).items():
                scores[key] = scores.get(key, 0.0) + weight * value
        return _ordered(scores)


@dataclass(frozen=True)
class MinMax:
    dense_share: float  # 0..1: dense's part of the sum

    @property
    def name(self) -> str:
        return f"minmax dense {self.dense_share:g}"

    def fuse(self, dense: Ranking, sparse: Ranking) -> list[Hashable]:
        scores: dict[Hashable, float] = {}
        for share, ranking in ((self.dense_share, dense), (1 - self.dense_share, sparse)):
            if not ranking:
                continue
            top, bottom = ranking[0][1], ranking[-1][1]
            span = (top - bottom) or 1.0
            for key, value in ranking:
                scores[key] = scores.get(key, 0.0) + share * (value - bottom) / span
        return _ordered(scores)


@dataclass(frozen=True)
class Rescue:
    """Dense's order, with BM25's first `n` hits put in right after dense's first (a
    per-query choice in effect: where words match nothing well, BM25's top is already
    among dense's; where an exact identifier matches, it comes second at worst)."""

    n: int = 1

    @property
    def name(self) -> str:
        return f"dense + bm25 top {self.n} at 2"

    def fuse(self, dense: Ranking, sparse: Ranking) -> list[Hashable]:
        order = [key for key, _ in dense]
        rescued = [key for key, _ in sparse[: self.n] if key not in order[:1 + self.n]]
        head = order[:1]
        rest = [key for key in order[1:] if key not in rescued]
        tail = [key for key, _ in sparse if key not in order and key not in rescued]
        return [*head, *rescued, *rest, *tail]


def _spread(ranking: Ranking) -> dict[Hashable, float]:
    values = [v for _, v in ranking]
    if len(values) < 2:
        return {key: 1.0 for key, _ in ranking}
    mean, deviation = statistics.fmean(values), statistics.pstdev(values) or 1.0
    low, high = mean - 3 * deviation, mean + 3 * deviation
    return {key: min(1.0, max(0.0, (v - low) / (high - low))) for key, v in ranking}


def _ordered(scores: dict[Hashable, float]) -> list[Hashable]:
    # ties by key, so a run is repeatable (Qdrant breaks them by point id)
    return [key for key, _ in sorted(scores.items(), key=lambda kv: (-kv[1], str(kv[0])))]


def candidates() -> list:
    """The rules compared: RRF at the usual k=60 and at smaller k with dense weighted up,
    DBSF weighted, min-max score fusion, and dense with BM25's top put in second."""
    rules: list = [RRF(k, w) for k in (1, 5, 20, 60) for w in (1.0, 1.4, 1.8, 2.5, 4.0)]
    rules += [DBSF(w) for w in (0.5, 0.8, 1.0, 1.4, 2.0, 3.0)]
    rules += [MinMax(a) for a in (0.3, 0.5, 0.7, 0.8, 0.9)]
    rules += [Rescue(n) for n in (1, 2)]
    return rules
