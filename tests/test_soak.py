"""The soak's quick mode on the test server: a few clients for a few seconds with blocks
in answers and streams left mid-answer, then every acknowledged note on disk, every file
readable and the engine idle (bench/soak/drive.py; the full run is `tandem bench --soak`)."""

from __future__ import annotations

from bench.soak.drive import Afterwards, SoakPlan, check_memory, engine_in_flight, soak


def test_a_quick_soak_loses_no_note_and_leaks_no_request(served):
    plan = SoakPlan(clients=4, duration_s=8.0, block_share=0.5, leave_share=0.3, seed=1)
    home = served.app.state.tandem.home
    results = served.run(soak(served.base_url, None, home / "memory", plan,
                              idle_timeout_s=120))
    assert results["requests"] >= plan.clients
    assert results["other_than_200"] == 0, results["by_status"]
    memory = results["memory"]
    assert memory["notes_acknowledged"] > 0, "some answers carried blocks"
    assert memory["notes_lost"] == [] and memory["blocks_without_status_line"] == 0
    assert memory["history_turns"] > 0, "the continuous conversation's turns are on disk"
    after = results["afterwards"]
    assert after["client_in_flight"] == 0 and not after["leaked"] and results["passed"]


def test_a_note_shown_as_remembered_but_missing_on_disk_is_counted_lost(tmp_path):
    (tmp_path / "notes").mkdir()
    found = check_memory(tmp_path, ["Shown but never written"])
    assert found["notes_lost"] == ["Shown but never written"]


def test_requests_in_flight_are_started_less_finished_and_aborted():
    text = "\n".join([
        'tandem_requests_started_total{kind="client"} 10.0',
        'tandem_requests_started_total{kind="background"} 3.0',
        'tandem_requests_finished_total{kind="client"} 8.0',
        'tandem_requests_aborted_total{kind="client"} 1.0',
        'tandem_requests_aborted_total{kind="background"} 2.0',
    ])
    assert engine_in_flight(text) == 2
    assert (engine_in_flight(text, "client"), engine_in_flight(text, "background")) == (1, 1)


def test_a_background_turn_that_never_ends_is_a_leak_and_a_backlog_is_not():
    def after(in_flight: int, started: int) -> Afterwards:
        return Afterwards(0, None, in_flight, started, {})
    assert after(1, 0).leaked
    assert not after(1, 5).leaked and not after(0, 0).leaked
    assert Afterwards(1, 0.5, 0, 0, {}).leaked  # a client request left running
