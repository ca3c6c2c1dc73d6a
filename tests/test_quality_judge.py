"""The quality bench's strict judge (bench/quality/judge.py) on hand-labelled replies,
the replies issue 37 quotes from the smol run among them: each is labelled by hand here,
and the judge must agree."""

from __future__ import annotations

import json

import pytest

from bench.quality.facts import FACTS, load_facts
from bench.quality.judge import judge

FRIDAY = "Can I deploy to production on a Friday afternoon?"
EMOJIS = "Should you use emojis when you answer me?"

# (question, reply, accepted, wrong, scored, right): labelled by hand
LABELLED = [
    # the answer is in the question: not scored, whatever the reply
    ("Tabs or spaces in my Go code?", "In Go, you can use the fmt.Span function to format a "
     "string with tabs or spaces.", ("tabs",), (), False, False),
    ("How do I rotate the signing key?", "To rotate the signing key, you need to use the "
     "rotate_key() function.", ("quayctl keys rotate", "rotate"), (), False, False),
    # "yes" names a wrong value, whatever else the reply holds
    (FRIDAY, "Yes, you can deploy to production on a Friday afternoon. The release freeze "
     "starts Friday 12:00.", ("no", "freeze"), ("yes",), True, False),
    # a bare "no" is no answer: "No, I'm not a bot" does not say never to use emojis
    (EMOJIS, "No, I'm not. I'm not a bot. I'm a human.", ("no", "never"), (), True, False),
    (EMOJIS, "Never use emojis in answers to the user.", ("no", "never"), (), True, True),
    # the index line repeated is not an answer
    ("Which spelling should you use when you write for me?",
     "[7c4ae630e3] answer in British English (rule, provisional)", ("british",), (),
     True, False),
    ("Which units should you use for distances?", "[b56e3435c7] rule: metric units",
     ("metric",), (), True, False),
    # ... nor a note's id in any other markup
    ("What is my favourite colour?", "The user's favourite colour is teal (note "
     "3f2a9c01be).", ("teal",), (), True, False),
    # the fact stated, copied from the note's body or not: right
    ("Which spelling should you use when you write for me?", "Use British spelling: "
     "colour, organise.", ("british",), (), True, True),
    ("What is my favourite colour?", "The user's favourite colour is teal.", ("teal",),
     ("blue",), True, True),
    ("Which code editor do I use?", "The user edits code in Helix, not Vim.", ("helix",),
     ("vscode",), True, True),
    # one of several candidates, or a look-alike beside it
    ("What is my favourite colour?", "It could be teal or blue.", ("teal",), (), True, False),
    ("What is my favourite colour?", "Maybe green, maybe teal.", ("teal",), ("green",),
     True, False),
    ("Which node version does the build need?", "Either 18 or 20.", ("20",), (), True,
     False),
    ("Which node version does the build need?", "It needs Node 20.", ("20",), ("16",), True,
     True),
    # a number inside another number is not the number
    ("Which node version does the build need?", "Released in 2020.", ("20",), (), True,
     False),
    ("What is my favourite colour?", "The most obvious answer would be blue.", ("teal",),
     ("blue",), True, False),
]


@pytest.mark.parametrize("question, reply, answers, wrong, scored, right", LABELLED,
                         ids=[f"{n}-{row[1][:24]}" for n, row in enumerate(LABELLED)])
def test_the_judge_agrees_with_the_hand_labels(question, reply, answers, wrong, scored,
                                                right):
    verdict = judge(question, reply, answers, wrong)
    assert (verdict.scored, verdict.correct) == (scored, right), verdict.reason


def test_every_item_of_the_committed_fact_set_is_scored():
    """The fact set was fixed where its question held its answer or its only answer was a
    bare yes or no."""
    for fact in load_facts(FACTS):
        verdict = judge(fact.question, "", fact.answers, fact.wrong)
        assert verdict.scored, (fact.question, verdict.reason)


def test_a_fact_set_given_with_facts_is_judged_the_same_way(tmp_path):
    path = tmp_path / "facts.jsonl"
    path.write_text(json.dumps({
        "note": {"kind": "reference", "title": "t", "body": "The kettle is blue."},
        "question": "Which colour is my kettle?", "answers": ["blue"],
        "wrong": ["red"]}) + "\n")
    [fact] = load_facts(path)
    assert fact.wrong == ("red",)
    assert not judge(fact.question, "Blue, or red.", fact.answers, fact.wrong).correct
    assert judge(fact.question, "It is blue.", fact.answers, fact.wrong).correct
