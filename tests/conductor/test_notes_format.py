"""Note files round-trip whatever text a model or a person writes; the package stays apart."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor.notes import NoteStore
from conductor.notes.note_format import Note, clean_tags, clean_title, parse, render

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=200, deadline=None)
@given(title=TEXT, body=TEXT, tags=st.lists(TEXT, max_size=4))
def test_any_text_round_trips_through_a_note_file(title: str, body: str, tags: list[str]) -> None:
    note = Note(
        id="abc123",
        title=clean_title(title) or "t",
        kind="gotcha",
        scope="user",
        body=body.replace("\r\n", "\n").replace("\r", "\n").strip("\n"),
        tags=clean_tags(tags),
    )
    assert parse(render(note)) == note


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(title=TEXT, body=TEXT)
def test_what_the_store_accepts_it_reads_back(store: NoteStore, title: str, body: str) -> None:
    result = store.add(title=title, body=body, kind="gotcha", scope="session", session="hyp")
    if not result.ok:
        assert result.reason in {"title_empty", "title_too_long", "secret", "cap_session"}
        return
    assert result.note is not None
    again = store.get(result.note.id)
    assert again is not None
    assert (again.title, again.body) == (result.note.title, result.note.body)
    store.delete(result.note.id)


def test_conductor_never_imports_server_or_engine() -> None:
    package = Path(__file__).resolve().parents[2] / "conductor"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"server", "engine"}, (path.name, name)
