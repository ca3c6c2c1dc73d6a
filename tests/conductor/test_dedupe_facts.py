"""Dedupe never overwrites one fact with another (issue 24): the labelled pairs in
tests/data/dedupe/pairs.jsonl, the issue's five pairs, a session of 22 distinct facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor.notes import NoteStore

PAIRS = [json.loads(line) for line in
         (Path(__file__).parents[1] / "data" / "dedupe" / "pairs.jsonl").read_text().splitlines()]
FALSE_MERGES_MAX = 0.01  # a false merge loses a fact
MISSED_MERGES_MAX = 0.15  # a missed merge only adds a note


def add(store: NoteStore, note: dict, kind: str = "reference", **where):
    return store.add(title=note["title"], body=note["body"], kind=kind,
                     **({"scope": "user"} | where), source="cli", has_user_message=True)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> list[tuple[dict, bool]]:
    """(pair, merged) for every labelled pair: the first added, then the second."""
    root = tmp_path_factory.mktemp("pairs")
    rows = []
    for number, pair in enumerate(PAIRS):
        store = NoteStore(root / str(number), "eval")
        first = add(store, pair["first"], pair["kind"])
        assert first.ok and not first.revised_existing
        second = add(store, pair["second"], pair["kind"])
        assert second.ok, second.reason
        rows.append((pair, bool(second.revised_existing)))
    return rows


def test_the_labelled_set_is_large_and_covers_both_labels():
    labels = [p["label"] for p in PAIRS]
    assert len(PAIRS) >= 200 and labels.count("same") >= 40 and labels.count("different") >= 100


def test_false_merges_stay_under_one_percent(outcomes):
    different = [(p, merged) for p, merged in outcomes if p["label"] == "different"]
    false = [p["second"]["title"] for p, merged in different if merged]
    assert len(false) / len(different) <= FALSE_MERGES_MAX, false


def test_missed_merges_stay_under_fifteen_percent(outcomes):
    same = [(p, merged) for p, merged in outcomes if p["label"] == "same"]
    missed = [p["second"]["title"] for p, merged in same if not merged]
    assert len(missed) / len(same) <= MISSED_MERGES_MAX, missed


@pytest.mark.parametrize(("first", "second"), [
    ("staging db port is 5433", "prod db port is 5432"),
    ("deploys go through the staging branch", "hotfixes go through the release branch"),
    ("the user's dog is called Biscuit", "the user's cat is called Pepper"),
    ("CI needs 8 GB of memory", "CI needs node 20"),
    ("use ruff for linting", "use black for formatting"),
])
def test_the_issues_five_pairs_stay_two_notes(tmp_path, first, second):
    store = NoteStore(tmp_path, "u")
    add(store, {"title": first, "body": first + "."})
    result = add(store, {"title": second, "body": second + "."})
    assert result.ok and not result.revised_existing
    assert sorted(n.title for n in store.list()) == sorted([first, second])


def test_a_restatement_still_revises_and_the_changelog_says_merge(tmp_path):
    store = NoteStore(tmp_path, "u")
    first = add(store, {"title": "Staging database port is 5433",
                        "body": "The staging database listens on port 5433."})
    again = add(store, {"title": "Port 5433 for the staging database",
                        "body": "Use port 5433 when connecting to the staging database."})
    assert again.revised_existing and again.note.id == first.note.id
    assert again.note.changelog[-1]["what"] == "merge"


def test_twenty_two_distinct_facts_in_a_session_make_twenty_notes_and_refusals(tmp_path):
    store = NoteStore(tmp_path, "u")
    results = [add(store, {"title": f"cap probe {n:02d}",
                           "body": f"Probe {n:02d} measured {100 + 7 * n} requests a second."},
                   scope="session", session="one-session") for n in range(22)]
    assert sum(r.ok and not r.revised_existing for r in results) == 20
    refused = [r for r in results if not r.ok]
    assert len(refused) == 2 and all("session" in str(r.reason) for r in refused)
    assert len(store.list(scope="session", session="one-session")) == 20
