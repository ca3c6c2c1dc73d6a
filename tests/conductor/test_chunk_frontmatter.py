"""A markdown file's frontmatter in conductor/search/chunks.py: read once, as YAML reads
it (libyaml's loader where PyYAML has it), the title the top of the trail; a frontmatter
YAML cannot read, or a title that is no text, keeps the title line's words as they were.
Pure unit tests of our own parsing, on real text."""

from __future__ import annotations

import pytest
import yaml

from conductor.search import chunks
from conductor.search.chunks import split_markdown, without_frontmatter


def front(*lines: str, body: str = "Body.\n") -> str:
    return "---\n" + "\n".join(lines) + "\n---\n" + body


@pytest.mark.parametrize(("line", "title"), [
    ("title: Plain words", "Plain words"),
    ("title: 'It''s: behind the poster'", "It's: behind the poster"),
    ('title: "caf\\u00e9 au lait"', "café au lait"),
    ("title: It's: here", "It's: here"),  # not YAML: the line's words as they are
    ("title: 1234", "1234"),  # no text to YAML: the words as written
    ("title: yes", "yes"),
    ("title: null", "null"),
    ("title:   spaced out   ", "spaced out"),
])
def test_the_title_is_read_as_yaml_reads_it(line, title):
    body, found = without_frontmatter(front("id: 0123456789", line, "kind: reference"))
    assert (body, found) == ("Body.\n", title)


def test_a_title_yaml_wraps_onto_lines_is_read_whole():
    # as yaml.dump writes a long title at its default width: one title over two lines
    text = yaml.safe_dump({"id": "0123456789", "title": "word " * 20 + "end"})
    assert "\n  " in text
    body, title = without_frontmatter("---\n" + text + "---\nBody.\n")
    assert title == "word " * 20 + "end" and body == "Body.\n"


def test_files_without_a_title_or_a_closed_frontmatter():
    assert without_frontmatter(front("id: 1")) == ("Body.\n", None)
    assert without_frontmatter("---\ntitle: open\nno end") == ("---\ntitle: open\nno end",
                                                                 None)
    assert without_frontmatter("# Heading\ntext") == ("# Heading\ntext", None)
    assert without_frontmatter(front("- a list", "- not a mapping")) == ("Body.\n", None)
    assert without_frontmatter(front("title: [a, b]")) == ("Body.\n", "[a, b]")
    assert without_frontmatter(front("title:", "kind: reference")) == ("Body.\n", None)
    # no YAML as a whole (a tab, a bad line): the title line read alone, as YAML reads it
    assert without_frontmatter(front("\tbad: [", "title: 'It''s here'")) == ("Body.\n",
                                                                              "It's here")
    assert [c.section for c in split_markdown(front("title: T", body="# H\nx\n"))] == [
        "T > H"]


def test_the_frontmatter_is_read_by_libyaml_where_pyyaml_has_it():
    assert chunks.LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
