"""Replicas share one notes root and keep their search indexes apart, each in its own
``$TANDEM_INDEX_DIR`` (docs/serving/replicas.md): a user's delete removes the asking
replica's indexes of them, and another replica drops its own once it finds the user's
files gone, when the user arrives there or when it starts (conductor/memory/erase.py).
One process plays both replicas: the index folder is read from the environment at each
call, so the test switches it."""

from __future__ import annotations

from pathlib import Path

from conductor.memory.services import MemoryServices
from conductor.memory.settings import MemorySettings
from conductor.notes import NoteStore
from conductor.search.index import SearchIndex

WORD = "beekeeping"


def _indexed(root: Path, user: str) -> None:
    """A note of `user` and both their indexes built, the notes' (tantivy) and the
    search's (embedded Qdrant, BM25 alone), in the replica the environment names."""
    store = NoteStore(root, user)
    assert store.add(title=f"{user} took up {WORD}", body=f"{WORD} in june", kind="reference",
                     scope="user").ok
    assert store.search(WORD)
    index = SearchIndex(root, user, None)
    index.sync()
    index.close()


def _holds_word(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and WORD.encode() in p.read_bytes()]


def _replica(home: Path, shared: Path) -> MemoryServices:
    return MemoryServices(home, settings=MemorySettings(shared_memory=shared))


def _user_folders(index_dir: Path, user: str) -> list[Path]:
    return [f for f in (index_dir / "index" / user, index_dir / "layers" / user) if f.exists()]


def test_a_users_delete_removes_the_asking_replicas_indexes_of_them(tmp_path, monkeypatch):
    shared, index_a = tmp_path / "shared", tmp_path / "a-index"
    monkeypatch.setenv("TANDEM_INDEX_DIR", str(index_a))
    _indexed(shared, "ana")
    _indexed(shared, "bo")
    assert _holds_word(index_a / "layers" / "ana") and (index_a / "index" / "ana").is_dir()
    counts = _replica(tmp_path / "a", shared).delete_user("ana", via="test", also={})
    assert counts["search_index"] == 1
    assert _user_folders(index_a, "ana") == []
    assert len(_user_folders(index_a, "bo")) == 2  # another user keeps theirs


def test_another_replica_drops_its_indexes_of_a_deleted_user_when_they_arrive(tmp_path,
                                                                              monkeypatch):
    shared, index_a, index_b = tmp_path / "shared", tmp_path / "a-index", tmp_path / "b-index"
    for index_dir in (index_b, index_a):  # ana was served on both, bo on b
        monkeypatch.setenv("TANDEM_INDEX_DIR", str(index_dir))
        _indexed(shared, "ana")
    monkeypatch.setenv("TANDEM_INDEX_DIR", str(index_b))
    _indexed(shared, "bo")
    monkeypatch.setenv("TANDEM_INDEX_DIR", str(index_a))
    _replica(tmp_path / "a", shared).delete_user("ana", via="test", also={})
    monkeypatch.setenv("TANDEM_INDEX_DIR", str(index_b))
    assert len(_user_folders(index_b, "ana")) == 2  # b was not asked: its folders stand
    b = _replica(tmp_path / "b", shared)
    # ana comes back (a new key of the name): b drops its old index before her new files
    assert b.store("ana").list() == []
    assert not (index_b / "index" / "ana").exists() or not b.store("ana").search(WORD)
    assert not (index_b / "layers" / "ana").exists()
    assert len(_user_folders(index_b, "bo")) == 2


def test_a_starting_replica_drops_its_indexes_of_users_deleted_meanwhile(tmp_path,
                                                                        monkeypatch):
    shared, index_a, index_b = tmp_path / "shared", tmp_path / "a-index", tmp_path / "b-index"
    monkeypatch.setenv("TANDEM_INDEX_DIR", str(index_b))
    _indexed(shared, "ana")
    _indexed(shared, "bo")
    monkeypatch.setenv("TANDEM_INDEX_DIR", str(index_a))
    _replica(tmp_path / "a", shared).delete_user("ana", via="test", also={})
    monkeypatch.setenv("TANDEM_INDEX_DIR", str(index_b))
    _replica(tmp_path / "b", shared).recover()  # what a start does
    assert _user_folders(index_b, "ana") == []
    assert len(_user_folders(index_b, "bo")) == 2
