"""`tandem jobs list|model|run` over real files, and `run` against the running server."""

from __future__ import annotations

import json

from conductor.cognition.jobs import JOBS
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.layers.user_layers import UserLayers
from server.cli.main import main

VERIFY, CONSOLIDATE, EXTRACT = JOBS


def test_jobs_list_shows_triggers_dirty_counts_and_models(tmp_path, capsys):
    from datetime import UTC, datetime

    layers = UserLayers(tmp_path / "memory", "ada")
    for i in range(7):
        layers.history.append(lambda seq, i=i: Turn(seq, datetime(2026, 11, 30, tzinfo=UTC), 0, (
            TurnMessage("user", (Part("text", f"q{i}"),)),)))
    assert main(["jobs", "list", "--home", str(tmp_path), "--user", "ada", "--json"]) == 0
    rows = {r["job"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[CONSOLIDATE]["dirty"] == 7 and rows[CONSOLIDATE]["state_threshold"] == 6
    assert rows[VERIFY]["schedule_utc_hours"] == [3, 15] and rows[EXTRACT]["model"] == "engine"
    assert main(["jobs", "list", "--home", str(tmp_path), "--user", "ada"]) == 0
    assert "dirty   7/6" in capsys.readouterr().out


def test_jobs_model_sets_an_endpoint_or_the_engine_and_refuses_bad_input(tmp_path, capsys):
    home = ["--home", str(tmp_path), "--user", "ada"]
    assert main(["jobs", "model", EXTRACT, "http://127.0.0.1:8001/v1", "--model", "qwen",
                 "--api-key-env", "TANDEM_JOB_KEY", *home]) == 0
    assert "qwen at http://127.0.0.1:8001/v1" in capsys.readouterr().out
    saved = json.loads((tmp_path / "memory/jobs/models.json").read_text())
    assert saved[EXTRACT] == {"base_url": "http://127.0.0.1:8001/v1", "model": "qwen",
                              "api_key_env": "TANDEM_JOB_KEY"}
    assert main(["jobs", "model", EXTRACT, "--inherit", *home]) == 0
    assert "engine" in capsys.readouterr().out
    assert main(["jobs", "model", EXTRACT, "not-a-url", "--model", "m", *home]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err
    assert main(["jobs", "model", EXTRACT, *home]) == 2
    # a key from any variable would send that secret, and the memory, to the endpoint
    assert main(["jobs", "model", EXTRACT, "http://127.0.0.1:8001/v1", "--model", "qwen",
                 "--api-key-env", "AWS_SECRET_ACCESS_KEY", *home]) == 2
    assert "TANDEM_JOB_" in capsys.readouterr().err


def test_jobs_run_asks_the_running_server(served, capsys):
    assert main(["jobs", "run", VERIFY, "--url", served.base_url, "--user", "cli-runner"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["job"] == VERIFY and record["trigger"] == "manual"
    assert record["user"] == "cli-runner" and record["outcome"] in ("changed", "unchanged")


def test_jobs_run_refuses_a_bad_user_with_a_message(served, capsys):
    assert main(["jobs", "run", VERIFY, "--url", served.base_url, "--user", "a\x1bb"]) == 2
    assert "user name holds a control character" in capsys.readouterr().err
