"""The bench's quick mode on the session's engine: it checks the harness, not the speed."""

from __future__ import annotations

import json

import pytest

from bench.lanes.lane import MODES
from bench.lanes.run import QUICK, run_bench
from bench.lanes.summary import paired_ratios
from bench.report import spread


@pytest.fixture(scope="module")
def report(served, engine, tmp_path_factory) -> tuple[dict, object]:
    out = tmp_path_factory.mktemp("bench")
    run_bench("tiny", quick=True, out_dir=out, engine=engine,
              submit=lambda coro: served.run(coro, timeout=300))
    return json.loads((out / "results.json").read_text()), out


def test_results_have_every_section_and_the_environment(report):
    results, _ = report
    assert {"bench", "environment", "session", "recall", "writer", "summary", "plots"} <= set(
        results)
    env = results["environment"]
    for key in ("profile", "model", "device", "cpu_count", "versions"):
        assert env[key] is not None, key
    assert env["profile"] == "tiny"
    assert {"vllm", "torch", "tandem"} <= set(env["versions"])
    assert results["bench"]["quick"] is True


def test_every_mode_has_every_turn_with_sane_figures(report):
    results, _ = report
    turns = results["session"]["turns"]
    for mode in MODES:
        assert sorted(t["turn"] for t in turns if t["mode"] == mode) == list(
            range(1, QUICK.turns + 1)), mode
    for t in turns + results["recall"]:
        assert 0.0 <= t["cached_fraction"] <= 1.0
        assert t["cached_tokens"] <= t["prompt_tokens"]
        assert t["ttft_s"] > 0 and t["completion_tokens"] > 0
    block = results["environment"]["block_size"]
    for mode in ("off", "shadow", "on"):  # each turn replays the one before: the floor
        rows = sorted((t for t in turns if t["mode"] == mode), key=lambda t: t["turn"])
        for before, now in zip(rows, rows[1:], strict=False):
            floor = before["prompt_tokens"] + before["completion_tokens"] - block
            assert now["cached_tokens"] >= floor, (mode, now["turn"])
    first_on = next(t for t in turns if t["mode"] == "on" and t["turn"] == 1)
    assert first_on["memory_tokens"] > 0, "turn 1 with memory on carries card and index"


def test_the_threaded_conversation_s_follow_ups_find_their_prefetched_notes(report):
    """Part 2b: the second turn of each topic matches a note the turn before prefetched,
    so the prefetch lane prefills less of it than memory on does."""
    results, _ = report
    threaded = results["threaded"]
    turns = threaded["turns"]
    assert {t["mode"] for t in turns} == {"off", "on", "prefetch", "hinted"}
    assert len(turns) == 32
    assert threaded["prefetch"]["hit_notes"] >= 3, threaded["prefetch"]
    prefilled = {(t["mode"], t["turn"]): t["prefilled_tokens"] for t in turns}
    follow_ups = range(2, 9, 2)
    assert sum(prefilled[("prefetch", n)] for n in follow_ups) < sum(
        prefilled[("on", n)] for n in follow_ups)
    names = {t["key"] for t in results["summary"]["targets"]}
    assert "threaded_follow_up_ttft_prefetch_over_off" in names


def test_the_hinted_lane_s_drafts_bring_the_notes_its_messages_then_match(report):
    """The hinted lane's client sends two drafts of each later message as hints: the
    notes they bring are matched by the message, which then prefills less than memory on
    without hints (the openers as well: a draft knows the new topic)."""
    results, _ = report
    for part in (results["session"], results["threaded"]):
        hinted = part["hinted"]
        assert hinted["hit_notes"] >= 3 and hinted["hit_rate"] >= 0.3, hinted
        later = [t for t in part["turns"] if t["turn"] >= 2]
        prefilled = {m: sum(t["prefilled_tokens"] for t in later if t["mode"] == m)
                     for m in ("on", "hinted")}
        assert prefilled["hinted"] < prefilled["on"], prefilled
        assert hinted["hit_turns"] and set(hinted["hit_turns"]) <= {t["turn"] for t in later}
    ratios = results["summary"]["ratios"]
    assert ratios["hit_turns_ttft_hinted_over_off"] > 0
    assert results["summary"]["ttft_fit"]["turns"] >= 6 and ratios["hinted_floor_over_off"] > 0
    names = {t["key"] for t in results["summary"]["targets"]}
    assert {"ttft_hinted_over_off", "threaded_ttft_hinted_over_off",
            "threaded_hit_turns_ttft_hinted_over_off"} <= names


def test_recall_and_writer_figures_are_there(report):
    results, _ = report
    assert sorted(r["mode"] for r in results["recall"]) == ["off", "on"] * QUICK.recall_samples
    writer = results["writer"]
    assert writer["write"]["outcome"] == "wrote" and writer["write"]["notes_written"] == 1
    assert writer["client_ttft_idle_s"] > 0 and writer["client_ttft_busy_s"] > 0
    assert len([s for s in writer["preemption"] if s["busy"]]) == QUICK.preempt_samples


def test_new_sessions_find_the_shared_context_cached_even_right_after_a_write(report):
    """The tiny profile shows no index (the default): a write leaves the shared context
    as it was, so even the session right after a write finds it cached and no prewarm of
    it is due. (With an index a write changes it and the prewarm refreshes it:
    tests/test_shared_context.py.) The idle moment before a session prefills the likely
    notes' branches: after the two writes, the written notes' alone; and a session whose
    opener matches a note reads its tail from the cache (issue 58, item 3)."""
    results, _ = report
    rows = results["new_sessions"]
    assert [(r["session_number"], r["mode"]) for r in rows if r["mode"] == "on"] == [
        (n, "on") for n in range(1, 6)]
    on = {r["session_number"]: r for r in rows if r["mode"] == "on"}
    assert on[4]["step"] == "after_write" and on[5]["step"] == "after_write_prewarmed"
    assert on[1]["prewarms"] and set(on[1]["prewarms"]) == {"note done"}
    assert on[4]["prewarms"] == [] and on[5]["prewarms"] == ["note done"] * 2
    block = results["environment"]["block_size"]
    matched = [r for n, r in on.items() if r["matched_notes_end"] is not None and n != 4]
    assert matched, "an opener matches a note"
    for r in matched:  # its note's tail came cached, from the branch prefilled before
        assert r["cached_tokens"] >= r["matched_notes_end"] - block, r
    assert all(r["shared_context_end"] is None for r in rows if r["mode"] == "off")
    for number in range(1, 6):  # everything up to the shared context came cached
        assert on[number]["cached_tokens"] >= on[number]["cached_floor"], on[number]
    assert results["summary"]["ratios"]["new_session_cached_minus_floor_min"] >= 0


def test_the_continuous_conversation_is_served_from_the_cache_message_after_message(report):
    results, out = report
    rows = results["continuous"]
    for way in ("continuous", "chat"):
        assert sorted(r["message"] for r in rows if r["way"] == way) == list(
            range(1, QUICK.turns + 1))
    continuous = sorted((r for r in rows if r["way"] == "continuous"),
                        key=lambda r: r["message"])
    block = results["environment"]["block_size"]
    for before, now in zip(continuous, continuous[1:], strict=False):
        floor = before["prompt_tokens"] + before["completion_tokens"] - block
        assert now["cached_tokens"] >= floor, now
    ratios = results["summary"]["ratios"]
    assert ratios["continuous_cached_minus_floor_min"] >= 0
    assert ratios["continuous_ttft_over_chat"] > 0
    assert (out / results["plots"]["continuous"]).stat().st_size > 0


def test_every_job_ran_and_a_client_preempted_the_busy_samples(report):
    results, _ = report
    jobs = results["jobs"]
    assert [r["job"] for r in jobs["runs"]] == ["verification_review",
                                                "working_memory.consolidate",
                                                "semantic_memory.extract"]
    assert all(r["outcome"] in ("changed", "unchanged") for r in jobs["runs"])
    assert all(r["cached_tokens"] > 0 for r in jobs["runs"])  # on the conversation's prefix
    busy = [s for s in jobs["preemption"] if s["busy"]]
    assert len(busy) == QUICK.preempt_samples
    assert all(s["job_outcome"] == "preempted" for s in busy)
    assert jobs["conversation_prefill"]["outcome"] == "done"
    after = jobs["after_consolidation"]
    assert after["cached_tokens"] >= jobs["conversation_prefill"]["prompt_tokens"] - 32


def test_summary_targets_and_plots_are_written(report):
    results, out = report
    summary = results["summary"]
    assert set(summary["modes"]) == set(MODES)
    assert {t["key"] for t in summary["targets"]} <= set(summary["ratios"])
    decode = next(t for t in summary["targets"] if t["key"] == "decode_on_over_off")
    assert decode["per_turn"]["min"] <= decode["per_turn"]["max"]
    for name in results["plots"].values():
        assert (out / name).stat().st_size > 0
    assert (out / "summary.md").read_text().startswith("## Tandem bench")


def test_per_turn_ratios_pair_each_later_turn_with_the_same_turn_of_the_base_mode():
    turns = [{"mode": m, "turn": k, "decode_s_per_token": v} for m, k, v in [
        ("off", 1, 1.0), ("on", 1, 9.0),  # turn 1 is not a later turn
        ("off", 2, 2.0), ("on", 2, 3.0),
        ("off", 3, 4.0), ("on", 3, 4.0),
        ("on", 4, 5.0),  # no off figure for turn 4: no pair
        ("off", 5, 0.0), ("on", 5, 1.0),  # a zero base: no ratio
    ]]
    ratios = paired_ratios(turns, "decode_s_per_token", "on", "off")
    assert ratios == [1.5, 1.0]
    assert spread(ratios) == {"min": 1.0, "median": 1.25, "max": 1.5}
    assert spread([]) is None


def test_the_bench_keeps_its_own_claims(report):
    """naive re-reads everything, lanes share no cache, modes rotate, busy samples abort."""
    results, _ = report
    turns = results["session"]["turns"]
    assert all(t["cached_fraction"] < 0.1 for t in turns if t["mode"] == "naive")
    assert all(t["cached_tokens"] == 0 for t in turns if t["turn"] == 1)  # lanes isolated
    for k in range(1, QUICK.turns + 1):
        order = [t["mode"] for t in turns[(k - 1) * len(MODES): k * len(MODES)]]
        assert sorted(order) == sorted(MODES) and order[0] == MODES[(k - 1) % len(MODES)]
    busy = [s for s in results["writer"]["preemption"] if s["busy"]]
    assert busy and all(s["background_finish_reason"] == "abort" for s in busy)


def test_the_tools_bench_measures_a_continuation_on_the_sessions_engine(served, engine,
                                                                         tmp_path):
    from bench.lanes.tools import ToolsBench, markdown, summarise

    bench = ToolsBench(engine, tmp_path)
    bench.prepare()
    rows = served.run(bench.run(2), timeout=300)
    assert sorted((r["sample"], r["way"]) for r in rows) == [
        (0, "with_search"), (0, "without"), (1, "with_search"), (1, "without")]
    summary = summarise(rows, engine.profile.block_size)
    assert summary["all_called"] and summary["continuation_prefilled_within_a_block"]
    text = markdown({"summary": summary, "rows": rows, "bench": {
        "profile": "tiny", "started_at": "now", "wall_s": 1.0, "block_size": 32}})
    assert "continuation prefilled - tool exchange" in text


def test_the_quality_bench_harness_runs_every_lane_on_a_few_items(served, engine, tmp_path):
    """The harness, not the accuracy: the tiny model's answers are noise."""
    from bench.quality.facts import FACTS, load_facts
    from bench.quality.run import LANES, run_quality, write_results

    facts = load_facts(FACTS)
    assert len(facts) >= 40
    results = served.run(run_quality(engine, tmp_path / "home", facts[:3], 2, 4,
                                     lambda _m: None, writer_items=1), timeout=300)
    rows = results["rows"]
    assert sorted((r["item"], r["lane"]) for r in rows) == sorted(
        (n, lane) for n in range(3) for lane in LANES)
    by_lane = {r["lane"]: r for r in rows if r["item"] == 0}
    # naive pastes every note and oracle one: their prompts are longer than off's
    assert by_lane["naive"]["prompt_tokens"] > by_lane["oracle"]["prompt_tokens"] > \
        by_lane["off"]["prompt_tokens"]
    assert len(results["remember"]) == 2
    text = write_results(results, tmp_path / "out")
    assert "| on |" in text and (tmp_path / "out" / "quality.png").stat().st_size > 1000
    # every row judged by the strict judge (bench/quality/judge.py, tested on its own)
    assert all({"scored", "correct", "verdict"} <= set(r) for r in rows)
    # the writer lane: the same conversation, its turn free and under the grammar
    writer = results["writer"]
    assert set(writer) == {"free", "grammar"} and all(len(m["runs"]) == 1
                                                      for m in writer.values())
    assert "| grammar |" in text


def test_a_bad_fact_set_is_a_message_naming_the_line(tmp_path):
    import pytest

    from bench.quality.facts import FactSetError, load_facts

    bad = tmp_path / "facts.jsonl"
    bad.write_text('{"note": {"kind": "reference", "title": "t", "body": "b"}, '
                   '"question": "q", "answers": ["a"]}\n{"question": "no note"}\n')
    with pytest.raises(FactSetError, match="facts.jsonl:2"):
        load_facts(bad)


def test_the_ledger_bench_runs_interleaved_agents_without_a_miss_and_writes_its_files(
        tmp_path):
    from bench.ledger.run import run_ledger_bench

    results = run_ledger_bench(tmp_path, quick=True)
    assert results["misses"] == 0 and results["turns_run"] == 8 * 10
    assert results["ids_held"] <= results["max_tokens"]
    assert results["flat_ids"] > 3 * results["ids_held"]  # the branches share their prefix
    assert {p.name for p in tmp_path.iterdir()} == {"results.json", "summary.md",
                                                    "ledger_ids.png"}
    assert json.loads((tmp_path / "results.json").read_text())["misses"] == 0


def test_the_ledger_bench_counts_the_misses_of_a_ledger_too_small(tmp_path):
    from bench.ledger.run import run_ledger_bench

    results = run_ledger_bench(tmp_path, quick=True, max_tokens=40_000)
    assert results["misses"] > 0 and results["flat_ledger"]["misses"] > results["misses"]


def test_the_screen_bench_times_the_screens_requests_on_a_large_store_and_writes_its_files(
        tmp_path):
    from bench.screen.run import run_screen_bench

    results = run_screen_bench(tmp_path, quick=True)
    assert results["store"]["notes"] == 2_000
    rows = results["requests"]
    assert {"list, first page", "tree", "search as you type (each prefix)"} <= set(rows)
    assert all(row["median_ms"] > 0 and row["p95_ms"] >= row["median_ms"]
               for row in rows.values())
    assert {p.name for p in tmp_path.iterdir()} == {"results.json", "summary.md",
                                                    "screen_latency.png"}


def test_the_ttft_fit_recovers_a_known_cost_and_the_floor_is_off_s_prefill_on_a_longer_prompt():
    from bench.lanes.ttft_model import fit_ttft, prefetch_floor

    def cost(prefilled: int, prompt: int) -> float:
        return 0.1 + 0.003 * prefilled + 0.0001 * prompt

    turns = []
    for turn in range(1, 8):  # turn 1 is not a later turn: a wild figure there is ignored
        for mode, prefilled, prompt in (("off", 50 + turn, 300 + 50 * turn),
                                        ("hinted", 120 - 9 * turn, 900 + 200 * turn)):
            turns.append({"mode": mode, "turn": turn, "prefilled_tokens": prefilled,
                          "prompt_tokens": prompt,
                          "engine_ttft_s": 9.0 if turn == 1 else cost(prefilled, prompt)})
    fit = fit_ttft(turns)
    assert fit["fixed_s"] == pytest.approx(0.1) and fit["r2"] == pytest.approx(1.0)
    assert fit["per_prefilled_token_s"] == pytest.approx(0.003)
    assert fit["per_prompt_token_s"] == pytest.approx(0.0001)
    later = range(2, 8)
    want = sum(cost(50 + t, 900 + 200 * t) for t in later) / sum(
        cost(50 + t, 300 + 50 * t) for t in later)
    assert prefetch_floor(turns, fit) == pytest.approx(want)
    assert fit_ttft(turns[:4]) is None and prefetch_floor(turns, None) is None


def test_the_replicas_soak_reports_each_users_figures_and_writes_its_files(tmp_path):
    """The soak over replicas' figures from its users' records (the cluster's run:
    `python -m bench.replicas.soak`, bench/results/replicas/): each user's worst later
    turn, the share at the goal, the router's paired overhead, the notes looked for."""
    from types import SimpleNamespace

    from bench.replicas.drive import SoakPlan, Turn, UserRun
    from bench.replicas.soak import figures, markdown, plot

    runs = []
    for i, cached in enumerate([1.0, 0.97, 0.5]):
        run = UserRun(f"user{i:04d}", replica="replica-a", routed_s=0.105, direct_s=0.1,
                      quiet_routed_s=0.052, quiet_direct_s=0.05)
        run.turns = [Turn(200, 0.3, prompt_tokens=100, remembered=True),
                     Turn(200, 0.1, prompt_tokens=130, cached_tokens=round(100 * cached))]
        runs.append(run)
    folder = tmp_path / "notes" / "user0000"
    folder.mkdir(parents=True)
    (folder / "n.md").write_text("user0000 keeps the spare key in jar number 0")
    results = figures(runs, SoakPlan(users=4), SimpleNamespace(shared=tmp_path), 12.0)
    cached = results["later_turn_cached_fraction"]
    assert (cached["p50"], cached["min"], cached["users_at_or_above_goal"]) == (0.97, 0.5,
                                                                                 2 / 3)
    assert results["users_not_started"] == 1
    assert results["router_overhead_quiet"]["paired_extra_ms_p50"] == pytest.approx(2.0)
    assert results["notes"] == {"acknowledged": 3, "lost": 2}
    results["environment"] = {"started": "now", "cpus": 2, "router": "vllm-router",
                              "loadavg_start": 1.0, "loadavg_end": 1.0, "run_wall_s": 60}
    assert "| users whose every later turn is >= 0.95 cached | 0.667 |" in markdown(results)
    plot(results, tmp_path / "replicas.png")
    assert (tmp_path / "replicas.png").stat().st_size > 0
    # the router's own log: its ring rebuilt when a replica went out, who it moved
    from bench.replicas.soak import router_log

    routed = "Consistent hash routing: key='header:x-user-id:{}' -> worker='{}' (index 0)"
    (tmp_path / "router.log").write_text("\n".join([
        "INFO Updated consistent hash ring with 3 workers and 480 virtual nodes",
        routed.format("user0001", "http://a"), routed.format("user0002", "http://b"),
        "INFO Updated consistent hash ring with 2 workers and 320 virtual nodes",
        routed.format("user0001", "http://c"), routed.format("user0002", "http://b")]))
    assert router_log(tmp_path / "router.log") == {
        "read": True, "ring_workers": [3, 2], "users_routed": 2,
        "users_on_more_than_one_replica": ["user0001"]}
