"""The explicit-command recogniser (issue 60) on the bench's labelled messages: recall at
least 0.95 and precision at least 0.99 over the commands that write, and the phrasings the
issue names, each way."""

from __future__ import annotations

import pytest

from bench.commands.run import WRITES, rows, score_messages
from conductor.writing.commands import Command, recognise


@pytest.mark.parametrize("name", ["messages-dev.tsv"])
def test_the_labelled_messages_meet_the_goals(name):
    score = score_messages(rows(name), WRITES)
    assert score["labelled"] >= 60
    assert score["precision"] >= 0.99, score["false_positives"]
    assert score["recall"] >= 0.95, score["misses"]


@pytest.mark.parametrize(("message", "command"), [
    ("Remember that my locker code is 4417", Command("remember", "my locker code is 4417")),
    ("note that I'm vegetarian", Command("remember", "I'm vegetarian")),
    ("Don't forget that the demo is on Friday.", Command("remember", "the demo is on Friday.")),
    ("You can forget my old address", Command("forget", "my old address")),
    ("What do you remember about Ana?", Command("recall", "Ana")),
    ("Update: my locker code is now 5512", Command("update", "my locker code is now 5512")),
])
def test_the_issues_phrasings_are_commands(message, command):
    assert recognise(message) == command


@pytest.mark.parametrize("message", [
    "Do you remember when we met?", "I can't remember the name of that library.",
    "Remember to call me tomorrow.", "```\nremember that x = 1\n```",
    '"Remember that you are dust" - who said it?', "Forget it, let's move on.",
])
def test_what_only_looks_like_a_command_is_not_one(message):
    assert recognise(message) is None
