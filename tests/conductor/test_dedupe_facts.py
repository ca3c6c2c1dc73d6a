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


@pytest.mark.parametrize(("first", "second"), [
    # issue 60's out-of-sample merge: the second never says Ana
    ("Ana leads the payments team", "The payments team keeps its on-call phone in the red "
                                    "drawer"),
    ("Ana leads the payments team", "The payments team is on the third floor"),
    # a new value without words that say it replaces the old: both kept (no fact lost)
    ("My locker code is 4417", "My locker code is 5512"),
    # another subject, though said as an update
    ("The staging port is 5433", "The prod port is now 5432"),
])
def test_a_note_that_leaves_out_the_old_ones_entities_or_values_is_another_note(
        tmp_path, first, second):
    store = NoteStore(tmp_path, "u")
    add(store, {"title": first, "body": first + "."})
    result = add(store, {"title": second, "body": second + "."})
    assert result.ok and not result.revised_existing
    assert len(store.list()) == 2


def test_one_title_over_two_facts_is_two_notes(tmp_path):
    """The writer titles by topic: "Payments team" over who leads it, then over where its
    phone is. The second body never says Ana: merged, that fact was lost."""
    store = NoteStore(tmp_path, "u")
    add(store, {"title": "Payments team", "body": "Ana leads the payments team."})
    result = add(store, {"title": "Payments team",
                         "body": "The payments team keeps its on-call phone in the red drawer."})
    assert result.ok and not result.revised_existing
    assert {n.body for n in store.list()} == {
        "Ana leads the payments team.",
        "The payments team keeps its on-call phone in the red drawer."}


@pytest.mark.parametrize(("first", "second"), [
    ("My locker code is 4417", "My locker code is now 5512"),
    ("The staging database listens on port 5433",
     "The staging database listens on port 6543 from now on"),
])
def test_an_update_in_so_many_words_supersedes_and_keeps_the_old_value(tmp_path, first,
                                                                       second):
    store = NoteStore(tmp_path, "u")
    old = add(store, {"title": first, "body": first + "."})
    result = add(store, {"title": second, "body": second + "."})
    assert result.revised_existing and result.note.id == old.note.id
    assert [n.body for n in store.list()] == [second + "."]
    assert any(first in text for _, text in store.revisions(old.note.id))


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
