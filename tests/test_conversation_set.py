"""The conversational search set says what it claims: every question's evidence is a turn
of its conversation, the kinds are there in number, a topic's questions are in one split
only, a paraphrase shares no content word with its evidence, and a build is repeatable."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bench.search.conversations import build_all
from conductor.search.chunks import split_markdown
from conductor.search.turn_text import turn_markdown
from tests.test_search_data import words


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("conversations")
    return root, build_all(root)


def turn_text(root, question, rel: str) -> str:
    path = root / "layers" / question.conversation / "history" / "turns" / rel
    return turn_markdown(path.read_text())


def test_every_evidence_is_a_turn_and_every_side_a_section(built):
    root, questions = built
    for q in questions:
        assert "{" not in q.query, q.query
        for rel, side in q.evidence:
            sections = [c.section for c in split_markdown(turn_text(root, q, rel))]
            assert side == "turn" or any(s.endswith(f"> {side}") for s in sections), (q, rel)


def test_the_set_is_big_enough_in_every_kind_and_split(built):
    _, questions = built
    kinds = Counter(q.kind for q in questions)
    assert len(questions) >= 250 and min(kinds.values()) >= 25, kinds
    assert set(kinds) == {"paraphrase", "lexical", "multi", "temporal", "speaker"}
    splits = Counter(q.split for q in questions)
    assert min(splits.values()) >= 100, splits
    assert all(len(q.evidence) >= 2 for q in questions if q.kind == "multi")


def test_a_topic_is_asked_about_in_one_split_only(built):
    _, questions = built
    split_of = {}
    for q in questions:
        assert split_of.setdefault(q.topic, q.split) == q.split, q.topic


def test_a_paraphrase_shares_no_content_word_with_its_evidence(built):
    root, questions = built
    for q in (q for q in questions if q.kind == "paraphrase"):
        said = " ".join(turn_text(root, q, rel).split("\n", 1)[1] for rel, _ in q.evidence)
        shared = words(q.query) & words(said.replace("## user", "").replace("## assistant", ""))
        assert not shared, (q.query, shared)


def test_a_build_is_the_same_every_time(built, tmp_path):
    root, questions = built
    again = build_all(tmp_path)
    assert again == questions
    first = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json"))
    second = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json"))
    assert first == second
    some = first[7]
    assert json.loads((root / some).read_text()) == json.loads((tmp_path / some).read_text())
