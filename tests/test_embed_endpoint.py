"""The search's dense vectors from an OpenAI-compatible embeddings endpoint: plain vLLM's
own server serving the tiny model as an embedding model (random weights: the path is real,
the meaning is not). A pytest session of its own (`-m embed_endpoint`, run by make test),
so each session starts one engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.load.plain_vllm import plain_vllm
from conductor.search.embedders import EmbedderError, EndpointEmbedder, default_embedder
from conductor.search.index import SearchIndex

pytestmark = pytest.mark.embed_endpoint
CORPUS = Path(__file__).resolve().parent / "data" / "search"


@pytest.fixture(scope="module")
def embeddings_url(built_models):
    with plain_vllm(built_models / "tiny-qwen3", "tiny-embed", "--runner", "pooling",
                    "--convert", "embed") as url:
        yield url


def library(root: Path) -> None:
    """A library source for user ada under `root` (a memory root)."""
    shutil.copytree(CORPUS, root / "library" / "ada")
    embed = root / "layers" / "ada" / "embed"
    embed.mkdir(parents=True)
    (embed / "sources.json").write_text(json.dumps({"sources": [
        {"id": "lib", "collection": "library", "type": "markdown_tree",
         "path": "library/{user}"}]}))


def test_an_endpoint_embedder_indexes_and_searches_with_its_own_version(embeddings_url,
                                                                        tmp_path):
    library(tmp_path)
    embedder = EndpointEmbedder(embeddings_url, "tiny-embed")
    assert embedder.dimensions == 128 and embedder.version == "tiny-embed:128"
    vectors = embedder.embed(["one", "two"])
    assert all(abs(sum(v * v for v in vector) - 1) < 1e-6 for vector in vectors)
    index = SearchIndex(tmp_path, "ada", embedder)
    assert index.sync().chunks_embedded == 9
    assert index.dir.name == "tiny-embed-128"
    assert index.search("E4012", "sparse", limit=1)[0].section == "Error codes > E4012"
    assert len(index.search("anything at all", "dense", limit=5)) == 5
    assert len(index.search("E4012 proxy limit", "hybrid", limit=5)) == 5


def test_a_switch_to_the_endpoint_is_a_migration(embeddings_url, tmp_path):
    library(tmp_path)
    SearchIndex(tmp_path, "ada", default_embedder()).sync()
    moved = SearchIndex(tmp_path, "ada", EndpointEmbedder(embeddings_url, "tiny-embed"))
    report = moved.sync()
    assert report.migrated_from == ["all-minilm-l6-v2-384"] and report.chunks_embedded == 9


def test_an_endpoint_that_refuses_is_a_clear_error(embeddings_url):
    with pytest.raises(EmbedderError, match="answered 404 for model 'no-such-model'"):
        EndpointEmbedder(embeddings_url, "no-such-model")
    with pytest.raises(EmbedderError, match="ConnectError"):
        EndpointEmbedder("http://127.0.0.1:9/v1", "x")


def test_the_server_uses_the_profiles_endpoint_and_falls_back_to_bm25_without_it(
        embeddings_url, tmp_path):
    import asyncio

    from conductor.memory.services import MemoryServices
    from server.idle.search import SearchService

    library(tmp_path / "memory")
    memory = MemoryServices(tmp_path)
    served = SearchService(memory, engine=None, endpoint=(embeddings_url, "tiny-embed", None))
    hits, dense = asyncio.run(served.search("ada", "E4012", "hybrid", None, 3))
    assert dense and served.embedder().version == "tiny-embed:128" and len(hits) == 3
    gone = SearchService(memory, engine=None, endpoint=("http://127.0.0.1:9/v1", "x", None))
    hits, dense = asyncio.run(gone.search("ada", "E4012", "hybrid", None, 3))
    assert not dense and hits[0].section == "Error codes > E4012"  # BM25 alone, said so
