"""memory_read's refs on real files: a note by id, a source file, one section, and nothing
outside the user's memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor.hidden.memory_refs import RefError, read_ref
from conductor.layers.user_layers import UserLayers
from conductor.notes import NoteStore
from conductor.search.sources import load_sources


@pytest.fixture
def memory(tmp_path: Path):
    root = tmp_path / "memory"
    store = NoteStore(root, "ada")
    layers = UserLayers(root, "ada")
    layers.ensure()
    (layers.files.semantic_dir / "facts.md").write_text(
        "# Facts\n\n## Build\n\nNode 20.\n\n## Family\n\nSister: Maren.\n\n"
        "# Other\n\n## Build\n\nA second build section.\n")
    registry = load_sources(root, "ada", layers.files.user_dir / "embed")
    return store, layers, registry


def test_a_note_is_read_by_id_with_its_title(memory):
    store, layers, registry = memory
    note = store.add(title="deploy runbook", body="make deploy from main", kind="reference",
                     scope="user", source="cli", has_user_message=True).note
    text = read_ref(note.id, store, layers, registry)
    assert text.startswith("# deploy runbook\n") and "make deploy from main" in text
    store.archive(note.id, "old", source="cli")
    with pytest.raises(RefError, match="archived"):
        read_ref(note.id, store, layers, registry)
    with pytest.raises(RefError, match="no note"):
        read_ref("0123456789", store, layers, registry)


def test_a_section_is_read_by_its_trail_or_its_last_heading_when_that_is_unique(memory):
    store, layers, registry = memory
    whole = read_ref("semantic/facts.md", store, layers, registry)
    assert "Maren" in whole and "Node 20." in whole
    family = read_ref("semantic/facts.md#Family", store, layers, registry)
    assert "Maren" in family and "Node 20" not in family
    build = read_ref("semantic/facts.md#Facts > Build", store, layers, registry)
    assert "Node 20." in build and "second" not in build
    with pytest.raises(RefError, match="2 sections"):
        read_ref("semantic/facts.md#Build", store, layers, registry)
    with pytest.raises(RefError, match="no section"):
        read_ref("semantic/facts.md#Nothing", store, layers, registry)


def test_working_memory_is_read_by_its_layer_path(memory):
    store, layers, registry = memory
    name = layers.files.working_memory.name
    assert "Working memory" in read_ref(f"working/{name}", store, layers, registry)


@pytest.mark.parametrize("ref", ["semantic/../../../etc/passwd", "/etc/passwd", "notes/../x.md",
                                 "semantic/nothing.md", "core/", "", "   "])
def test_nothing_outside_the_users_memory_is_read(memory, ref):
    store, layers, registry = memory
    with pytest.raises(RefError):
        read_ref(ref, store, layers, registry)
