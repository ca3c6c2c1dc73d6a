"""The lanes bench's summary of issue 58's four figures, on synthetic results: our own
arithmetic (the extra prefill over off, the idle-time prefill, the new sessions by number)
and the other benches' committed figures it carries with their source. No engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.index.load import EMPTY, MEMORY_TOKENS
from bench.index.variants import DEFAULT
from bench.lanes.agent_costs import other_benches
from bench.lanes.lane import MODES, PrefetchTally
from bench.lanes.summary import markdown, summarise
from bench.paths import RESULTS_DIR

NONE = {"index": None, "overhead": None}
# later turns' prefilled tokens per mode (off: 50): prefetch +15, on +90, hinted +2
PREFILLED = {"off": 50, "shadow": 50, "on": 140, "naive": 900, "prefetch": 65, "hinted": 52}


def _turn(mode: str, turn: int, prefilled: int, ttft: float = 0.3) -> dict[str, Any]:
    return {"mode": mode, "turn": turn, "prompt_tokens": 1000, "cached_tokens": 1000 - prefilled,
            "prefilled_tokens": prefilled, "memory_tokens": 0,
            "cached_fraction": (1000 - prefilled) / 1000, "ttft_s": ttft,
            "engine_ttft_s": ttft - 0.01, "decode_s_per_token": 0.1}


def _new_session(number: int, step: str, mode: str, ttft: float) -> dict[str, Any]:
    return {**_turn(mode, number, 40, ttft), "step": step, "session_number": number,
            "prewarms": [], "shared_context_end": None, "cached_floor": None}


def results() -> dict[str, Any]:
    """A run's results with what the summary reads: two later turns a mode."""
    turns = [_turn(m, 1, 500) for m in MODES]
    for mode in MODES:  # the prefetch lane's later turns prefill 60 and 70: mean 65
        spread = {"prefetch": (-5, 5)}.get(mode, (0, 0))
        turns += [_turn(mode, k, PREFILLED[mode] + d) for k, d in zip((2, 3), spread,
                                                                         strict=True)]
    prefetch, hinted = PrefetchTally(), PrefetchTally()
    prefetch.fetched(("a", "b"), 100, "done")
    prefetch.fetched(("c",), 40, "preempted")  # prefilled an unknown part
    prefetch.fetched(("d",), 30, "done")
    hinted.fetched(("a",), 50, "done")
    tally = prefetch.as_dict()
    tally["runs"][-1]["prefilled"] = 10  # a run that counts its own (the branches' hook)
    sessions = [_new_session(n, step, mode, ttft) for n, step, on in (
        (1, "unchanged", 0.4), (2, "unchanged", 0.2), (3, "unchanged", 0.24),
        (4, "after_write", 0.3)) for mode, ttft in (("on", on), ("off", 0.2))]
    return {"environment": {"profile": "synthetic", "model": "m", "device": "cpu", "gpu": None,
                            "cpus_usable": 2, "block_size": 32},
            "session": {"turns": turns, "prefetch": tally,
                        "hinted": hinted.as_dict()},
            "threaded": {"turns": turns, "modes": ["off", "on", "prefetch", "hinted"]},
            "recall": [], "writer": {"client_ttft_busy_over_idle": 1.2, "write": {
                "record_tokens": 1, "outcome": "-", "notes_written": 0, "tokens_generated": 0,
                "duration_s": 0.0, "gate_answer": "no", "gate_probability": 0.5},
                "client_ttft_idle_s": 0.1, "client_ttft_busy_s": 0.12,
                "background_steps_after_client_max": 1, "background_all_preempted": True},
            "new_sessions": sessions}


def _target(summary: dict[str, Any], key: str) -> dict[str, Any]:
    return next(t for t in summary["targets"] if t["key"] == key)


def test_the_later_turns_extra_prefill_over_off_and_the_idle_prefill_a_turn():
    """Item 1: prefetch without hints prefills 15 tokens a later turn over off (goal 16:
    met), on 90 and hinted 2 (reported); the idle prefetch prefilled its finished runs'
    tokens, a run's own prefilled count where it carries one, per later turn."""
    r = results()
    r["summary"] = summary = summarise(r, other=NONE)
    ratios = summary["ratios"]
    assert ratios["extra_prefill_prefetch_over_off"] == pytest.approx(15)
    assert ratios["extra_prefill_on_over_off"] == pytest.approx(90)
    assert ratios["extra_prefill_hinted_over_off"] == pytest.approx(2)
    assert ratios["background_prefill_prefetch_per_turn"] == pytest.approx((100 + 10) / 2)
    assert ratios["background_prefill_hinted_per_turn"] == pytest.approx(50 / 2)
    row = _target(summary, "extra_prefill_prefetch_over_off")
    assert row["met"] is True and row["target"] == "<= 16"
    assert _target(summary, "extra_prefill_on_over_off")["met"] is None  # reported
    r["session"]["turns"] = [t if t["mode"] != "prefetch" or t["turn"] < 2
                             else {**t, "prefilled_tokens": 67} for t in r["session"]["turns"]]
    assert _target(summarise(r, other=NONE), "extra_prefill_prefetch_over_off")["met"] is False
    text = markdown(r)
    assert "| later-turn extra prefill over off, prefetch without hints" in text
    assert "| 15.000 |  | <= 16 | yes |" in text


def test_the_new_session_row_gives_its_ratio_by_session_number():
    """Item 3: the unchanged step's mean (1.4) and each session's on / off (2.0, 1.0,
    1.2), in the row, the Markdown and results.json's summary (every session there)."""
    r = results()
    r["summary"] = summary = summarise(r, other=NONE)
    row = _target(summary, "new_session_unchanged_ttft_on_over_off")
    assert row["measured"] == pytest.approx(0.84 / 0.6) and row["met"] is False
    assert row["per_session"] == pytest.approx([2.0, 1.0, 1.2])
    assert [s["session_number"] for s in summary["new_session_by_number"]] == [1, 2, 3, 4]
    assert summary["new_session_by_number"][3]["ttft_on_over_off"] == pytest.approx(1.5)
    assert "| by session: 2.00, 1.00, 1.20 | <= 1.3 | **no** |" in markdown(r)
    json.dumps(summary)  # what results.json holds


def _index_run(folder: Path, name: str, day: str, accuracy: dict[str, float],
               walls: dict[str, float]) -> None:
    def rounds(wall: float) -> list[dict[str, float]]:
        return [{"wall_s": wall, "ttft_p95_s": wall}] * 3

    group: dict[str, Any] = {"vllm": {"32": {"rounds": rounds(1.0)}}}
    group |= {lane: {"32": {"rounds": rounds(w), "best": {"prompt_tokens_mean": 600}}}
              for lane, w in walls.items()}
    run = {"bench": {"started_at": f"{day}T10:00:00"},
           "accuracy": {"by_variant": {v: {"accuracy": a} for v, a in accuracy.items()}},
           "load": {"groups": [group]}}
    (folder / "index" / name).mkdir(parents=True)
    (folder / "index" / name / "results.json").write_text(json.dumps(run))


def test_items_2_and_4_come_from_the_other_benches_results_with_their_run(tmp_path):
    """Item 2: the fastest lived-in variant whose accuracy is no lower than the old
    default's (not the faster one that answers worse, nor the store without notes),
    pooled over the runs; item 4: the overhead bench's p95 and stalls with its verdicts.
    Each row names the bench and run; with no committed run the row says so, unjudged."""
    _index_run(tmp_path, "run-1", "2026-12-01", {DEFAULT: 0.30, "good": 0.50, "bad": 0.20},
               {DEFAULT: 1.30, "good": 1.08, "bad": 1.01, EMPTY: 1.00})
    _index_run(tmp_path, "run-2", "2026-12-02", {DEFAULT: 0.30, "good": 0.50},
               {DEFAULT: 1.30, "good": 1.12})
    overhead = tmp_path / "overhead" / "synthetic"
    overhead.mkdir(parents=True)
    (overhead / "results.json").write_text(json.dumps({
        "started_at": "2026-12-03T09:00:00", "goal_p95_ms": 5.0, "p95_met": True,
        "stalls_met": False, "server_share": {"on": {"p50_ms": 1.0, "p95_ms": 4.5}},
        "stalls": {"on": {"stall_share": 0.02}, "idle": {"stall_share": 0.005}}}))
    other = other_benches(tmp_path, "synthetic")
    assert other["index"]["variant"] == "good"
    assert other["index"]["value"] == pytest.approx(1.10)  # median of 1.08 x3, 1.12 x3
    r = results()
    r["summary"] = summary = summarise(r, other=other)
    index = _target(summary, "index_lived_in_wall_over_vllm")
    assert index["met"] is True and index["source"] == (
        "`tandem bench --index`, run-1, run-2 (2026-12-01 to 2026-12-02)")
    p95 = _target(summary, "overhead_server_share_p95_ms")
    assert (p95["measured"], p95["met"]) == (4.5, True)
    assert p95["source"] == "`tandem bench --overhead`, synthetic (2026-12-03)"
    assert _target(summary, "overhead_loop_stall_share")["met"] is False
    text = markdown(r)
    for item in (1, 2, 3, 4):
        assert f"issue 58, item {item}" in text
    assert "vLLM sent memory's tokens" not in text  # neither run measured it
    assert "; from `tandem bench --overhead`, synthetic (2026-12-03) | 4.500 |" in text

    empty = summarise(results(), other=other_benches(tmp_path / "none", "synthetic"))
    missing = _target(empty, "index_lived_in_wall_over_vllm")
    assert (missing["measured"], missing["met"], missing["source"]) == (
        None, None, "no committed run")


def test_item_2_splits_off_what_vllm_sent_memorys_tokens_costs_where_a_run_has_it(
        tmp_path):
    """A run with vLLM sent memory's tokens (the index bench's yardstick since run 9): the
    item 2 row says what those tokens cost vLLM itself and the variant over them."""
    _index_run(tmp_path, "run-1", "2026-12-05", {DEFAULT: 0.30, "good": 0.50},
               {DEFAULT: 1.30, "good": 1.14, MEMORY_TOKENS: 1.09, EMPTY: 1.05})
    other = other_benches(tmp_path, "synthetic")
    assert other["index"]["memory_tokens"] == pytest.approx(1.09)
    assert other["index"]["over_memory_tokens"] == pytest.approx(1.14 / 1.09)
    r = results()
    r["summary"] = summarise(r, other=other)
    assert ("no notes 1.05; vLLM sent memory's tokens 1.09, the variant over it 1.05)"
            in markdown(r))


def test_the_committed_index_and_overhead_results_still_read():
    """The summary reads today's committed files of both benches (a format change there
    would silently drop items 2 and 4 from the lanes' summary)."""
    other = other_benches(RESULTS_DIR, "bench-0.6b")
    assert other["index"] is not None and other["index"]["value"] > 0
    assert other["overhead"] is not None and other["overhead"]["value"] > 0
    assert other["overhead"]["source"].startswith("`tandem bench --overhead`, bench-0.6b (")
