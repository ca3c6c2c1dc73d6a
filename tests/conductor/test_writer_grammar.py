"""The grammar the background writer's turn is generated under: what it lets a model
write is exactly what the block parser takes (conductor/writing/writer_grammar.py). The
real engine under it: tests/test_writer.py."""

from __future__ import annotations

import pytest
from xgrammar.testing import _is_grammar_accept_string as accepts

from conductor.writing.blocks import BlockRequest, parse_block
from conductor.writing.writer_grammar import NOTHING, writer_grammar

ADD = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: the kettle is blue\n\n'
       "The user keeps a blue kettle on the left of the stove.\n</tandem_memory>")
UPDATE = ('<tandem_memory op="update" id="0123456789">\ntitle: the kettle is red\n\n'
          "The user painted the kettle red.\n</tandem_memory>")


@pytest.mark.parametrize("text", [NOTHING, ADD, f"{ADD}\n{ADD}", f"{ADD}\n{UPDATE}"])
def test_what_the_grammar_allows_the_parser_takes(text):
    assert accepts(writer_grammar(["0123456789"]), text)
    blocks = [part + "</tandem_memory>" for part in text.split("</tandem_memory>")[:-1]]
    for block in blocks:
        assert isinstance(parse_block(block.strip("\n")), BlockRequest)


@pytest.mark.parametrize("text, why", [
    (ADD.replace('kind="reference"', 'kind="rule"'), "a rule stands for the user's word"),
    (ADD.replace('scope="user"', 'scope="team"'), "no such scope"),
    (ADD.replace("title: the kettle is blue", "title:   "), "a blank title"),
    (ADD.replace("title: the kettle is blue\n\n", ""), "no title"),
    (ADD.replace("The user keeps", "<b>The user keeps"), "a tag in the body"),
    (ADD[:-len("</tandem_memory>")], "a block left open"),
    (f"Sure! {ADD}", "text around the blocks"),
    ("\n".join([ADD] * 4), "more than three blocks"),
    (UPDATE.replace("0123456789", "9876543210"), "an update of a note not listed"),
    ("Nothing to remember.", "not the exact words"),
])
def test_what_the_parser_would_refuse_or_ignore_the_grammar_does_not_allow(text, why):
    assert not accepts(writer_grammar(["0123456789"]), text), why


def test_without_listed_notes_there_is_no_update():
    assert not accepts(writer_grammar(), UPDATE)
    assert accepts(writer_grammar(), ADD)


def test_a_project_note_is_offered_only_in_a_projects_conversation():
    project = ADD.replace('scope="user"', 'scope="project"')
    assert accepts(writer_grammar(), project)
    assert not accepts(writer_grammar(scopes=("user", "session")), project)
    assert accepts(writer_grammar(scopes=("user", "session")), ADD)
