"""The load bench's harness, on the test server (its speed is the bench's, not a test's)."""

from __future__ import annotations

import json

from bench.load.clients import LoadPlan, percentile, prompts, run_round
from bench.load.run import Lane, measure_interleaved, ratios, write_report


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
    assert all(r["prompt_tokens"] > 100 for r in detail)  # the server's own count


def test_a_round_counts_what_each_request_read_from_the_prefix_cache(served, tiny_profile):
    """The same round twice: the second's prompts are the first's, so each request (the
    streamed ones too) reads all but its last block from the cache, and the round's
    prefilled mean falls by that much (the index bench's load prefilled column)."""
    plan = LoadPlan(clients=4, max_tokens=4)
    headers = {"X-Tandem-Memory": "off"}
    first = served.run(run_round(served.base_url, "tiny", plan, seed=8, headers=headers))
    again = served.run(run_round(served.base_url, "tiny", plan, seed=8, headers=headers))
    block = tiny_profile.block_size
    for r in again["requests_detail"]:
        assert r["cached_tokens"] >= r["prompt_tokens"] - block, r
    assert again["uncached_tokens_mean"] <= block
    assert first["uncached_tokens_mean"] > again["uncached_tokens_mean"] + 50


def test_the_lanes_take_turns_and_the_report_holds_each_and_its_ratio_to_vllm(served,
                                                                             tmp_path):
    said: list[str] = []
    servers = measure_interleaved({"vllm": served.base_url,
                                   "memory_off": Lane(served.base_url)},
                                  "tiny", [2], rounds=2, progress=said.append, settle_s=0)
    assert [m.split()[0] for m in said] == ["vllm", "memory_off", "memory_off", "vllm"]
    assert servers["vllm"]["2"]["best"]["requests"] == 2
    assert len(servers["memory_off"]["2"]["rounds"]) == 2
    for figures in servers["memory_off"]["2"]["rounds"]:
        # the round's CPU, split: the server's process (here this one) and its engine's
        assert figures["server_cpu_s"] >= 0 and figures["engine_cpu_s"] > 0
    results = {"environment": {"profile": "tiny"}, "servers": servers,
               "config": {"max_tokens": 16, "prompt_words": "100-250"},
               "ratios": ratios(servers)}
    paired = results["ratios"]["memory_off@2"]
    assert paired["wall_ratio_median"] > 0 and paired["target"] == 1.05
    summary = write_report(results, tmp_path)
    assert "| memory_off@2 |" in summary
    assert json.loads((tmp_path / "results.json").read_text())["servers"]["vllm"]
    assert (tmp_path / "load.png").stat().st_size > 0


def test_a_paired_ratio_is_the_median_of_round_by_round_ratios():
    def lane(walls):
        return {"8": {"best": {"wall_s": min(walls), "ttft_p95_s": min(walls)},
                      "rounds": [{"wall_s": w, "ttft_p95_s": w} for w in walls]}}
    found = ratios({"vllm": lane([1.0, 2.0, 1.0]), "memory_off": lane([1.1, 2.0, 1.3])})
    r = found["memory_off@8"]
    assert round(r["wall_ratio"], 3) == 1.1  # best over best
    assert round(r["wall_ratio_median"], 3) == 1.1  # median of 1.1, 1.0, 1.3
    assert not r["met"]


def test_met_is_judged_on_the_paired_median_not_the_best_round():
    def lane(walls):
        return {"8": {"best": {"wall_s": min(walls), "ttft_p95_s": None},
                      "rounds": [{"wall_s": w, "ttft_p95_s": None} for w in walls]}}
    # One lucky vLLM round makes best-over-best 1.2x; round by round memory on is at par.
    found = ratios({"vllm": lane([0.8, 1.0, 1.0]), "memory_on": lane([0.96, 1.02, 1.0])})
    r = found["memory_on@8"]
    assert round(r["wall_ratio"], 2) == 1.2 and round(r["wall_ratio_median"], 2) == 1.02
    assert r["met"]


def test_memory_on_is_also_held_to_vllm_given_the_same_hidden_tokens():
    def lane(wall):
        return {"32": {"best": {"wall_s": wall, "ttft_p95_s": wall},
                       "rounds": [{"wall_s": wall, "ttft_p95_s": wall}]}}
    found = ratios({"vllm": lane(1.0), "vllm_memory_tokens": lane(1.1),
                    "memory_on": lane(1.12)})
    assert not found["memory_on@32"]["met"]  # 1.12x plain vLLM
    same = found["memory_on@32 / vllm_memory_tokens"]
    assert same["met"] and same["target"] == 1.05  # the server adds 2% to the same tokens


def test_pooled_ratios_take_the_median_over_every_paired_round_of_every_run():
    from bench.load.pool import markdown, pooled

    def run(vllm, off):
        def lane(walls):
            return {"8": {"rounds": [{"wall_s": w, "ttft_p95_s": w} for w in walls]}}
        return {"servers": {"vllm": lane(vllm), "memory_off": lane(off)}}
    # Run one alone reads 1.2x, run two 1.0x; over all five pairs the median is 1.0x.
    table = pooled([run([1.0, 1.0, 1.0], [1.2, 1.2, 0.9]), run([2.0, 2.0], [2.0, 2.0])])
    r = table["memory_off@8 / vllm"]
    assert r["rounds"] == 5 and r["wall_ratio_median"] == 1.0 and r["met"]
    assert "| memory_off@8 / vllm | 5 | 1.00x |" in markdown(table, ["a", "b"])


def test_pooling_a_folder_without_results_says_so_and_exits_2(tmp_path, capsys):
    from bench.load.pool import main

    assert main([str(tmp_path)]) == 2
    assert "no load bench results.json" in capsys.readouterr().err
    assert main(["--help"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_the_notes_lane_user_holds_every_quality_fact_as_a_live_note(tmp_path):
    from bench.load.run import LOAD_USER, write_notes
    from bench.quality.facts import FACTS, load_facts
    from conductor.notes import NoteStore

    facts = load_facts(FACTS)
    write_notes(tmp_path, facts)
    notes = NoteStore(tmp_path / "memory", LOAD_USER).list(include_stale=False)
    assert sorted(n.title for n in notes) == sorted(f.title for f in facts)


def test_the_notes_lane_is_shown_beside_vllm_and_memory_on_without_a_target(tmp_path):
    def lane(wall):
        return {"32": {"best": {"wall_s": wall, "ttft_p95_s": wall},
                       "rounds": [{"wall_s": wall, "ttft_p95_s": wall}]}}
    found = ratios({"vllm": lane(1.0), "memory_on": lane(1.05),
                    "memory_on_notes": lane(1.26)})
    over_vllm, over_on = found["memory_on_notes@32"], found["memory_on_notes@32 / memory_on"]
    assert round(over_vllm["wall_ratio_median"], 2) == 1.26 and over_vllm["met"] is None
    assert round(over_on["wall_ratio_median"], 2) == 1.2 and over_on["target"] is None
    summary = write_report({"environment": {"profile": "tiny"}, "ratios": found,
                            "config": {"max_tokens": 16, "prompt_words": "100-250"},
                            "servers": {}}, tmp_path)
    assert "| memory_on_notes@32 | 1.26x | 1.26x | 1.26x | 1.26x | - | - |" in summary
