"""Hybrid search's fusion: the dense and the BM25 rankings, each `DEPTH` deep (or the hits
asked for, when more), as one ranking by the mean of their z-scored scores.

Each list's scores become z-scores within that list (minus its mean, over its standard
deviation); a hit is scored by the mean of its two z-scores. A hit one list lacks takes
that list's lowest z (it ranked below everything the list holds), or -1 where the list's
scores do not spread (a single hit: BM25's lone exact match of an identifier). No weight is
fitted to any set: where one mode's scores are flat (dense over a chatty conversation,
where many turns read alike; BM25 over a paraphrase that shares only common words), its
hits spread little and the mode whose top stands out leads, query by query.

Chosen by issue 59 (`python -m bench.search.external`) among the rules known to carry
across data (equal RRF at k=60, min-max and z-score combinations, Qdrant's DBSF, two
per-query choices), on the dev half of our own conversational set alone, and then read
on a public set nobody here wrote (LoCoMo), where it stays within 0.01 of the better
single mode at 5 hits (bench/README.md, "Fusion on conversational memory nobody here
wrote"). The rule before it, RRF k=5 with dense weighted 4:1, had been fitted to our
own set, where dense is strong, and followed dense down on LoCoMo (recall@5 0.420
against BM25's 0.571).

The score a fused hit shows is that mean mapped onto (0, 1) by the logistic function:
the order is the mean's, a hit as good as the lists' average reads 0.5, one that stands
out nears 1. The mean itself is 0 for a lone hit (each list's only entry is its own
mean) and below 0 for most hits, which read as "no match" to a model or a person.

Fused here rather than in Qdrant, so the rule is exactly what the bench scores, in the
embedded engine and against a Qdrant server alike.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable
from typing import Any

DEPTH = 50  # each ranking this deep: the z-scores are over the lists the bench scored
RULE = "zscore dense 0.5"  # the bench's name for it (bench/search/fusion.py: ZScore(0.5))

Found = list[tuple[float, dict[str, Any]]]  # (score, payload), best first


def key_of(payload: dict[str, Any]) -> tuple:
    """One chunk: the same chunk in both rankings is one hit."""
    return (payload.get("source"), payload.get("path"), payload.get("section"),
            payload.get("hash"))


def depth(limit: int) -> int:
    """How deep each ranking is taken for `limit` fused hits."""
    return max(DEPTH, limit)


def _z(ranking: Found, keys: list[tuple]) -> dict[tuple, float]:
    """Each of `keys`' z-score in the list (`zscores`)."""
    return zscores([(key_of(payload), score) for score, payload in ranking], keys)


def zscores(scored: list[tuple[Hashable, float]], keys: list) -> dict:
    """Each of `keys`' z-score among `scored` (key, score) pairs, its first score where it
    appears twice. A key the list lacks takes its lowest z (it ranked below all the list
    holds), or -1 where the list's scores do not spread (one hit: BM25's lone exact match
    of an identifier still ranks above what it lacks). The bench's rules use it too."""
    own: dict = {}
    for key, score in scored:
        own.setdefault(key, score)
    if not own:
        return dict.fromkeys(keys, 0.0)
    values = [score for _, score in scored]
    mean, deviation = statistics.fmean(values), statistics.pstdev(values)
    z = {key: (score - mean) / (deviation or 1.0) for key, score in own.items()}
    rest = min(z.values()) if deviation else -1.0
    return {key: z.get(key, rest) for key in keys}


def shown(mean_z: float) -> float:
    """The score a fused hit shows: its mean z-score on (0, 1), in the same order."""
    return 1.0 / (1.0 + math.exp(-mean_z))


def fused(by_meaning: Found, by_words: Found, limit: int) -> Found:
    """The two rankings as one, best first, `limit` long, ordered by the mean of each
    hit's two z-scores; a hit's score is that mean `shown` (0 to 1, above 0)."""
    payloads = {key_of(p): p for _, p in [*by_words, *by_meaning]}
    keys = list(payloads)
    dense, words = _z(by_meaning, keys), _z(by_words, keys)
    scores = {key: (dense[key] + words[key]) / 2 for key in keys}
    order = sorted(scores, key=lambda key: (-scores[key], str(key)))
    return [(shown(scores[key]), payloads[key]) for key in order[:limit]]
