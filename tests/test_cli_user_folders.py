"""Every CLI `--user` files a user where the HTTP side does: `josé`, `o'brien` and `山田`
are users there (a key's label, a trusted proxy's X-Tandem-User), so `tandem notes`,
`memory`, `jobs`, `mcp` and `serve` take them too and open the very folder a request for
them opens (conductor/storage/paths.user_folder). A name that can be no one's is a clear
line and exit status 2, never a traceback. Real note and layer files throughout."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime

import pytest

from conductor.cognition.jobs import JOBS
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.layers.user_layers import UserLayers
from conductor.memory.settings import MemorySettings
from conductor.notes import NoteStore
from server.cli import notes as notes_cli
from server.cli.main import main
from server.turn.memory import request_user

NAMES = ["josé", "o'brien", "山田", "../x"]
INVALID = {"": "empty", "a\x00b": "control character", "x" * 129: "longer than"}


def http_folder(name: str) -> str:
    """The folder a request whose API key is labelled `name` reads and writes."""
    return request_user({}, None, MemorySettings(user_name="engine"), key_user=name)


@pytest.fixture(autouse=True)
def _no_engine_user(monkeypatch):
    monkeypatch.delenv("TANDEM_USER", raising=False)


@pytest.mark.parametrize("name", NAMES)
def test_notes_reads_and_writes_the_folder_a_request_for_the_user_uses(tmp_path, capsys,
                                                                        name):
    store = NoteStore(tmp_path / "memory", http_folder(name))
    note = store.add(title="Prefers oolong tea", kind="reference", scope="user").note
    opts = ["--user", name, "--home", str(tmp_path)]
    assert main(["notes", "list", *opts, "--json"]) == 0
    assert [n["id"] for n in json.loads(capsys.readouterr().out)] == [note.id]
    assert main(["notes", "ratify", note.id, *opts]) == 0
    assert store.get(note.id).status == "ratified"  # written where the server reads
    assert main(["notes", "list", "--user", name.upper(), "--home", str(tmp_path)]) == 0
    assert note.id in capsys.readouterr().out  # one user whatever the case, as requests
    assert sorted(p.name for p in (tmp_path / "memory" / "notes").iterdir()) == [
        http_folder(name)]


def test_the_default_user_is_the_engines_own_as_requests_without_a_key_see_it(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(getpass, "getuser", lambda: "we ird/name")
    engine = http_folder(MemorySettings().user_name)  # a request with no key: the engine's
    assert notes_cli.user_of(None) == engine != "local"
    monkeypatch.setenv("TANDEM_USER", "josé")  # `tandem serve`'s own user, when set
    assert notes_cli.user_of(None) == http_folder("josé")


def test_memory_and_jobs_read_the_users_layers_where_the_server_keeps_them(tmp_path,
                                                                            capsys):
    layers = UserLayers(tmp_path / "memory", http_folder("josé"))
    layers.ensure()
    for i in range(7):
        layers.history.append(lambda seq, i=i: Turn(seq, datetime(2026, 11, 30, tzinfo=UTC),
                                                    0, (TurnMessage("user", (Part(
                                                        "text", f"question {i}"),)),)))
    opts = ["--user", "josé", "--home", str(tmp_path)]
    assert main(["memory", "history", *opts, "--last", "1"]) == 0
    assert "question 6" in capsys.readouterr().out
    assert main(["jobs", "list", *opts, "--json"]) == 0
    _, consolidate, _ = JOBS
    rows = {r["job"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[consolidate]["dirty"] == 7


def test_mcp_serves_the_users_folder(tmp_path, monkeypatch):
    import server.mcp.stdio as stdio

    seen = []
    monkeypatch.setattr(stdio, "run_stdio", lambda home, user, *rest: seen.append(user) or 0)
    assert main(["mcp", "--user", "josé", "--home", str(tmp_path)]) == 0
    assert seen == [http_folder("josé")]


@pytest.mark.parametrize("command", [["notes", "list"], ["memory", "history"],
                                     ["jobs", "list"], ["mcp"]])
@pytest.mark.parametrize("name", list(INVALID))
def test_a_name_that_can_be_no_ones_is_a_clear_line_and_status_2(tmp_path, capsys, command,
                                                                   name):
    assert main([*command, "--user", name, "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"tandem {command[0]}: " in err and INVALID[name] in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "memory" / "notes").exists()
