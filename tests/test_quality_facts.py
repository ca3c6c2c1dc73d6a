"""The quality bench's fact set and its item kinds (bench/quality/facts.py): a revised note
is written as the store's update and shown with its new body, several notes are written
for one question, and each kind is counted on its own."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bench.quality.facts import FACTS, FactSetError, load_facts, notes_prompt, write_facts
from conductor.notes import NoteStore


def test_the_committed_set_holds_each_kind_of_item():
    kinds = Counter(fact.item_kind for fact in load_facts(FACTS))
    assert kinds["single"] >= 40 and kinds["updated"] >= 6 and kinds["several notes"] >= 6


def test_an_updated_item_is_written_as_an_update_and_shown_with_its_new_value(tmp_path):
    updated = [f for f in load_facts(FACTS) if f.item_kind == "updated"]
    store = NoteStore(tmp_path, "q")
    assert write_facts(store, updated) == len(updated)
    for fact in updated:
        [note] = [n for n in store.list() if n.title == fact.title]
        assert note.body == fact.revised
        assert store.revisions(note.id)  # the old value went to the note's history
        # the old value is a wrong value, and the notes the lanes paste hold only the new
        assert fact.wrong and not any(w in notes_prompt([fact]) for w in fact.wrong)


def test_an_item_of_several_notes_writes_each_of_them(tmp_path):
    several = [f for f in load_facts(FACTS) if f.item_kind == "several notes"]
    store = NoteStore(tmp_path, "q")
    assert write_facts(store, several) == sum(len(f.notes()) for f in several)
    titles = {n.title for n in store.list()}
    assert all(note.title in titles for f in several for note in f.notes())


def test_a_more_that_is_not_a_list_of_notes_is_a_message_naming_the_line(tmp_path):
    bad = tmp_path / "facts.jsonl"
    bad.write_text(json.dumps({"note": {"kind": "reference", "title": "t", "body": "b"},
                               "question": "q", "answers": ["a"], "more": ["x"]}) + "\n")
    with pytest.raises(FactSetError, match="facts.jsonl:1"):
        load_facts(bad)
