"""Fusion rules over a dense and a sparse ranking, in Python, so that many rules can be
scored on the same rankings (one search a query and mode, not one a rule).

A ranking is a list of (key, score), best first. `RRF` is Qdrant's reciprocal rank
fusion (weight / (k + rank), ranks from 0), `DBSF` Qdrant's distribution-based score
fusion (each list's scores mapped by mean +- 3 standard deviations to 0..1, then summed,
weighted), `MinMax` a weighted sum of min-max normalised scores, `ZScore` a convex
combination of z-scored scores, and two per-query choices: `PeakRRF` (RRF weighted by how
far each list's top hit stands out of its own scores) and `OverlapGate` (fused where the
two lists agree, the more outstanding list alone where they do not).
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable
from dataclasses import dataclass

from conductor.search.fusion import zscores

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


@dataclass(frozen=True)
class ZScore:
    """`dense_share` x dense's z-scores + the rest x BM25's, each over its own list; a hit
    one list lacks takes that list's lowest z (it ranked below all it holds), or -1 where
    the list's scores do not spread (one hit: BM25's lone exact match of an identifier
    still ranks its hit above what it lacks). A list of scores that fall off evenly
    spreads its hits little, so the list whose top stands out leads: no weight is fitted
    to a set."""

    dense_share: float = 0.5

    @property
    def name(self) -> str:
        return f"zscore dense {self.dense_share:g}"

    def fuse(self, dense: Ranking, sparse: Ranking) -> list[Hashable]:
        keys = list(dict.fromkeys(key for key, _ in [*dense, *sparse]))
        scores: dict[Hashable, float] = dict.fromkeys(keys, 0.0)
        for share, ranking in ((self.dense_share, dense), (1 - self.dense_share, sparse)):
            for key, z in zscores(ranking, keys).items():
                scores[key] += share * z
        return _ordered(scores)


@dataclass(frozen=True)
class PeakRRF:
    """RRF at k, each list weighted for this query by how far its top hit stands above
    its own scores (its z-score; weights sum to 2, equal when neither stands out)."""

    k: float = 60

    @property
    def name(self) -> str:
        return f"rrf k={self.k:g} weighted by top z"

    def fuse(self, dense: Ranking, sparse: Ranking) -> list[Hashable]:
        peaks = [max(0.0, _top_z(r)) for r in (dense, sparse)]
        total = sum(peaks)
        weights = [2 * p / total for p in peaks] if total > 0 else [1.0, 1.0]
        scores: dict[Hashable, float] = {}
        for weight, ranking in zip(weights, (dense, sparse), strict=True):
            for rank, (key, _) in enumerate(ranking):
                scores[key] = scores.get(key, 0.0) + weight / (self.k + rank)
        return _ordered(scores)


@dataclass(frozen=True)
class OverlapGate:
    """A per-query choice from the lists' agreement: where their top 10s share at least
    `agree` hits, equal RRF at k=60; where they do not, the list whose top hit stands out
    more (its z-score), the other's hits after it."""

    agree: int = 3

    @property
    def name(self) -> str:
        return f"overlap>={self.agree} rrf60, else the outstanding list"

    def fuse(self, dense: Ranking, sparse: Ranking) -> list[Hashable]:
        shared = {k for k, _ in dense[:10]} & {k for k, _ in sparse[:10]}
        if len(shared) >= self.agree:
            return RRF(60).fuse(dense, sparse)
        first, second = (dense, sparse) if _top_z(dense) >= _top_z(sparse) else (sparse, dense)
        order = list(dict.fromkeys(key for key, _ in first))
        return order + [key for key in dict.fromkeys(k for k, _ in second) if key not in order]


def _z(ranking: Ranking) -> dict[Hashable, float]:
    """Each key's z-score within the list (its best score where it appears twice)."""
    values = [v for _, v in ranking]
    if not values:
        return {}
    mean, deviation = statistics.fmean(values), statistics.pstdev(values) or 1.0
    out: dict[Hashable, float] = {}
    for key, value in ranking:
        out.setdefault(key, (value - mean) / deviation)
    return out


def _top_z(ranking: Ranking) -> float:
    return max(_z(ranking).values(), default=0.0)


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


def transferable() -> list:
    """The rules known to carry across data, each with its conventional setting and no
    weight fitted: equal RRF at k=60, equal min-max and z-score combinations, Qdrant's
    DBSF unweighted, and the two per-query choices. Issue 59 chooses among these."""
    return [RRF(60), MinMax(0.5), ZScore(0.5), DBSF(1.0), PeakRRF(60), OverlapGate(3)]


def earlier() -> list:
    """The served rules of earlier rounds, scored beside them: k=5 dense 4:1 (issue 39)
    and k=1 dense 1.8:1 (issue 15)."""
    return [RRF(5, 4.0), RRF(1, 1.8)]


def candidates() -> list:
    """The rules compared: RRF at the usual k=60 and at smaller k with dense weighted up,
    DBSF weighted, min-max score fusion, and dense with BM25's top put in second."""
    rules: list = [RRF(k, w) for k in (1, 5, 20, 60) for w in (1.0, 1.4, 1.8, 2.5, 4.0)]
    rules += [DBSF(w) for w in (0.5, 0.8, 1.0, 1.4, 2.0, 3.0)]
    rules += [MinMax(a) for a in (0.3, 0.5, 0.7, 0.8, 0.9)]
    rules += [Rescue(n) for n in (1, 2)]
    return rules
