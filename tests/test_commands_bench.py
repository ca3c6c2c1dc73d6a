"""The commands bench (issue 60): `python -m bench.commands.run --help` prints its usage and
runs nothing, and the learned recogniser's bench (`bench.commands.learned`) scores each
leave-one-set-out fold with the rules as they stood before that set was tuned on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.commands.learned import choose, decide, tally
from bench.commands.rules_then import FOLD_RULES, rules_at
from bench.commands.run import RESULTS_DIR, WRITES, rows

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", ["bench.commands.run", "bench.commands.learned"])
def test_help_prints_usage_and_runs_nothing(module):
    summary = RESULTS_DIR / "commands" / "summary.md"
    before = summary.stat().st_mtime_ns if summary.exists() else None
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {module}")
    assert (summary.stat().st_mtime_ns if summary.exists() else None) == before


@pytest.mark.parametrize(("held", "precision", "recall"), [("test", 0.813, 0.735),
                                                           ("holdout", 0.933, 0.892)])
def test_each_fold_reads_its_set_with_the_rules_that_had_not_seen_it(held, precision,
                                                                      recall):
    """The figures each set's first blind run gave (the bench's SETS say so), not today's
    1.000: the rules come from git at FOLD_RULES' commit."""
    rule = rules_at(FOLD_RULES[held])
    messages = rows(f"messages-{held}.tsv")
    score = tally([m["label"] for m in messages], [rule(m["text"]) for m in messages])
    assert (round(score["precision"], 3), round(score["recall"], 3)) == (precision, recall)


def test_the_methods_combine_rules_and_classifier_as_named():
    p_remember = np.array([0.1, 0.9, 0.0, 0.0, 0.0])  # KINDS: none, remember, forget, ...
    p_none = np.array([0.9, 0.1, 0.0, 0.0, 0.0])
    assert decide("classifier", "none", p_remember, 0.8) == "remember"
    assert decide("classifier", "update", p_none, 0.8) == "none"
    assert decide("rules or classifier", "update", p_none, 0.8) == "update"
    assert decide("rules or classifier", "none", p_remember, 0.95) == "none"
    assert decide("rules vetoed", "remember", p_none, 0.5) == "none"
    assert decide("rules vetoed", "remember", p_remember, 0.5) == "remember"
    assert decide("rules vetoed", "none", p_remember, 0.5) == "none"


def test_the_choice_wants_the_rules_recall_then_precision():
    def entry(method, t, right, flagged, labelled=100):
        return {"method": method, "model": "m", "threshold": t,
                "pooled": tally(["remember"] * labelled + ["none"] * 100,
                                ["remember"] * right + ["none"] * (labelled - right)
                                + ["remember"] * (flagged - right)
                                + ["none"] * (100 - flagged + right))}
    grid = {"rules": entry("rules", 0, 80, 90),
            "a": entry("rules or classifier", 0.5, 85, 100),  # recall up, precision down
            "b": entry("rules or classifier", 0.9, 82, 88),   # both up: chosen
            "c": entry("rules vetoed", 0.5, 70, 70)}          # precision 1, recall lost
    assert grid["b"]["pooled"]["recall"] > grid["rules"]["pooled"]["recall"]
    assert choose(grid) == "b"
    assert choose(grid, "rules vetoed") == "c"
    assert set(WRITES) == {"remember", "forget", "update"}


def test_the_served_fall_back_scores_what_the_bench_measured():
    """`memory.command_recogniser: learned` runs the weights `--export` wrote from the chosen
    run: on the never-tuned set it gives that run's figures (results.json), not others."""
    import json

    from conductor.writing.command_classifier import recognise_learned

    results = json.loads((RESULTS_DIR / "commands" / "learned" / "results.json").read_text())
    measured = results["fourth"][results["chosen"]]
    messages = rows("messages-fourth.tsv")
    said = [(lambda found: found.kind if found else "none")(recognise_learned(m["text"]))
            for m in messages]
    score = tally([m["label"] for m in messages], said)
    assert (score["right"], score["flagged"]) == (measured["right"], measured["flagged"])
