"""The load bench's harness, on the test server (its speed is the bench's, not a test's)."""

from __future__ import annotations

import json

from bench.load_bench import measure_server, ratios, write_report
from bench.load_client import LoadPlan, percentile, prompts, run_round


def test_every_client_has_a_prompt_of_its_own_in_the_planned_length():
    plan = LoadPlan(clients=16)
    texts = prompts(plan, seed=3)
    assert len(set(texts)) == 16
    assert len({t.split(":")[0] for t in texts}) == 16  # distinct from the first words
    assert all(plan.min_words <= len(t.split(": ", 1)[1].split()) <= plan.max_words
               for t in texts)


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (
        50.0, 95.0, 99.0)
    assert percentile([], 50) is None


def test_a_round_sends_every_client_and_times_the_streamed_ones(served):
    figures = served.run(run_round(served.base_url, "tiny", LoadPlan(clients=4, max_tokens=4),
                                   seed=7, headers={"X-Tandem-Memory": "off"}))
    assert (figures["requests"], figures["errors"]) == (4, 0)
    detail = figures["requests_detail"]
    assert sum(r["streamed"] for r in detail) == 2
    for r in detail:
        assert r["output_tokens"] > 0
        assert (r["ttft_s"] is not None) == r["streamed"]
        assert r["ttft_s"] is None or 0 < r["ttft_s"] <= r["latency_s"]
    assert max(r["latency_s"] for r in detail) <= figures["wall_s"]


def test_the_report_holds_each_server_and_its_ratio_to_vllm(served, tmp_path):
    measured = measure_server(served.base_url, "tiny", [2], rounds=1, progress=lambda _m: None)
    assert measured["2"]["best"]["requests"] == 2
    servers = {"vllm": measured, "memory_off": measured}
    results = {"environment": {"profile": "tiny"}, "servers": servers,
               "config": {"max_tokens": 16, "prompt_words": "100-250"},
               "ratios": ratios(servers)}
    assert results["ratios"]["memory_off@2"]["wall_ratio"] == 1.0
    assert results["ratios"]["memory_off@2"]["met"]
    summary = write_report(results, tmp_path)
    assert "| memory_off@2 | 1.00x |" in summary
    assert json.loads((tmp_path / "results.json").read_text())["servers"]["vllm"]
    assert (tmp_path / "load.png").stat().st_size > 0
