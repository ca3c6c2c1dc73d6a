"""`tandem memory layers` and `tandem memory history` over real layer files."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.layers.user_layers import UserLayers
from server.cli.main import main


def with_turns(home, n: int) -> UserLayers:
    layers = UserLayers(home / "memory", "ada")
    layers.ensure()
    for i in range(n):
        layers.history.append(lambda seq, i=i: Turn(
            seq, datetime(2026, 11, 30, 9, i, tzinfo=UTC), 60,
            (TurnMessage("user", (Part("text", f"question {i}"),)),
             TurnMessage("assistant", (Part("text", f"answer {i}"),
                                       Part("status", "\n\n› remembered: x"))))))
    return layers


def test_memory_layers_lists_files_sizes_tokens_and_the_checkpoint(tmp_path, capsys,
                                                                 built_models):
    (tmp_path / "models").symlink_to(built_models, target_is_directory=True)
    with_turns(tmp_path, 3)
    assert main(["memory", "layers", "--home", str(tmp_path), "--user", "ada",
                 "--profile", "tiny", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    agent = next(f for f in listed["files"] if f["name"] == "AGENT.md")
    assert agent["bytes"] == (tmp_path / "memory/layers/ada/core/AGENT.md").stat().st_size
    assert 10 < agent["tokens"] < agent["bytes"]
    assert listed["history"] == {"turns": 3, "last_seq": 3, "quarantined": []}
    assert listed["checkpoint_seq"] == 0
    assert main(["memory", "layers", "--home", str(tmp_path), "--user", "ada",
                 "--profile", "tiny"]) == 0
    text = capsys.readouterr().out
    assert "WORKING_MEMORY.md" in text and "3 turns, last #3; checkpoint #0" in text


def test_memory_history_prints_the_last_turns_in_local_time(tmp_path, capsys):
    with_turns(tmp_path, 4)
    assert main(["memory", "history", "--home", str(tmp_path), "--user", "ada",
                 "--last", "2"]) == 0
    out = capsys.readouterr().out
    assert "question 1" not in out and "question 2" in out and "question 3" in out
    assert "#3  2026-11-30 10:02 +0100" in out and "› remembered: x" in out


def test_memory_commands_refuse_bad_input_with_a_message(tmp_path, capsys):
    assert main(["memory", "history", "--home", str(tmp_path), "--user", "a\x1bb"]) == 2
    assert "user name holds a control character" in capsys.readouterr().err
    assert main(["memory", "history", "--home", str(tmp_path), "--user", "ada",
                 "--last", "0"]) == 2
    assert "--last" in capsys.readouterr().err
    assert main(["memory", "history", "--home", str(tmp_path), "--user", "ada"]) == 0
    assert "no turns yet" in capsys.readouterr().out


def test_memory_sources_sync_and_search_from_the_command_line(tmp_path, capsys):
    import shutil
    from pathlib import Path

    corpus = Path(__file__).resolve().parent / "data" / "search"
    shutil.copytree(corpus, tmp_path / "memory" / "library" / "ada")
    home = ["--home", str(tmp_path), "--user", "ada"]
    assert main(["memory", "sources", *home, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert not listed["from_file"] and [s["id"] for s in listed["sources"]] == [
        "core", "semantic", "notes", "history"]
    registry = tmp_path / "memory/layers/ada/embed/sources.json"
    assert listed["registry"] == str(registry)
    registry.parent.mkdir(parents=True)
    registry.write_text(json.dumps({"sources": [{"id": "lib", "collection": "library",
                                                 "type": "markdown_tree",
                                                 "path": "library/{user}"}]}))
    assert main(["memory", "sync", *home]) == 0
    assert "synced 4 files (4 changed, 0 removed): 9 chunks embedded" in capsys.readouterr().out
    assert main(["memory", "search", "E4012", "--mode", "sparse", "--json", *home]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["path"] == "errors.md" and hits[0]["collection"] == "library"
    assert set(hits[0]) == {"collection", "source", "path", "section", "score", "text"}


def test_a_bad_registry_is_a_message_from_the_command_line(tmp_path, capsys):
    registry = tmp_path / "memory/layers/ada/embed/sources.json"
    registry.parent.mkdir(parents=True)
    registry.write_text('{"sources": [{"id": "x", "collection": "library", "type": "pdf"}]}')
    assert main(["memory", "search", "anything", "--home", str(tmp_path), "--user", "ada"]) == 2
    error = capsys.readouterr().err
    assert "source 'x'" in error and "type must be one of" in error


def test_an_index_the_server_holds_is_said_so_not_a_traceback(tmp_path, capsys):
    from conductor.search.embedders import default_embedder
    from conductor.search.index import SearchIndex

    held = SearchIndex(tmp_path / "memory", "ada", default_embedder())
    held.sync()  # open, as the running server keeps it
    try:
        home = ["--home", str(tmp_path), "--user", "ada"]
        assert main(["memory", "sync", *home]) == 0
        assert "the running server holds this index" in capsys.readouterr().err
        assert main(["memory", "search", "anything", "--url", "http://127.0.0.1:9",
                     *home]) == 2
        assert "no server answers at http://127.0.0.1:9" in capsys.readouterr().err
    finally:
        held.close()


def test_a_search_of_an_index_the_server_holds_asks_the_server(served, tmp_path, capsys):
    from conductor.search.embedders import default_embedder
    from conductor.search.index import SearchIndex

    held = SearchIndex(tmp_path / "memory", "ada", default_embedder())
    held.sync()
    try:
        assert main(["memory", "search", "anything", "--url", served.base_url, "--json",
                     "--home", str(tmp_path), "--user", "ada"]) == 0
        assert json.loads(capsys.readouterr().out) == []  # the server's own (empty) index
    finally:
        held.close()
