"""The index bench (bench/index/): its variants served from profile files, the accuracy
half on the session's engine, and the verdicts, report and plot from the figures."""

from __future__ import annotations

import pytest

from bench.index.run import DEFAULT, markdown, plot, verdicts
from bench.index.variants import LEADING, QUICK_VARIANTS, VARIANTS, profile_file


def test_each_variant_is_a_profile_file_that_serves_its_notes_shown(tmp_path):
    from conductor.hidden.tail_notes import DEFAULT_SHOWN, NotesShown
    from engine.profiles import load_profile, load_profile_file

    tiny = load_profile("tiny")
    seen = set()
    for variant in VARIANTS:
        path = profile_file(tiny, variant.notes_shown, tmp_path / variant.name)
        served = load_profile_file(path)
        assert served.name == "tiny" and served.model == tiny.model
        assert served.memory.mode == tiny.memory.mode
        seen.add(NotesShown.of(served.memory.notes_shown))
    assert len(seen) == len(VARIANTS)  # no two variants serve the same thing
    # the variant the bench chose is what the code now shows by default
    assert NotesShown.of(next(v for v in VARIANTS if v.name == LEADING).notes_shown) \
        == DEFAULT_SHOWN


def test_the_accuracy_half_asks_every_question_in_every_variant(served, engine, tmp_path):
    """The harness, not the accuracy: the tiny model's answers are noise. The variant
    without an index prompts fewer tokens than the default."""
    from bench.index.accuracy import measure_accuracy
    from bench.quality.facts import FACTS, load_facts

    facts = load_facts(FACTS)[:3]
    results = served.run(measure_accuracy(engine, tmp_path / "home", facts, QUICK_VARIANTS,
                                          4, lambda _m: None), timeout=300)
    names = [v.name for v in QUICK_VARIANTS]
    assert sorted((r["item"], r["lane"]) for r in results["rows"]) == sorted(
        (n, name) for n in range(3) for name in names)
    lean, full = (results["by_variant"][name] for name in (names[1], names[0]))
    assert lean["prompt_tokens_mean"] < full["prompt_tokens_mean"]
    assert {"accuracy", "by_kind", "copies_markup"} <= set(full)


def _load(walls: dict[str, float]) -> dict:
    return {"to_vllm": {name: {"32": {"wall_ratio_median": wall, "ttft_p95_ratio_median": wall,
                                      "wall_ratios": [wall - 0.02, wall, wall + 0.03],
                                      "prompt_tokens_mean": 900.0, "uncached_tokens": 210.0,
                                      "server_cpu_s": 0.2, "engine_cpu_s": 2.6,
                                      "vllm_server_cpu_s": 0.1, "vllm_engine_cpu_s": 2.5}}
                        for name, wall in walls.items()}}


def _accuracy(values: dict[str, float]) -> dict:
    return {"by_variant": {name: {"accuracy": value, "by_kind": {"single": value},
                                  "copies_markup": 1, "prompt_tokens_mean": 500.0}
                           for name, value in values.items()}}


def test_a_variant_meets_the_bar_only_fast_enough_and_accurate_enough(tmp_path):
    accuracy = _accuracy({DEFAULT: 0.30, "fast-and-good": 0.27, "fast-but-worse": 0.20,
                          "slow-but-good": 0.40})
    load = _load({DEFAULT: 1.40, "fast-and-good": 1.08, "fast-but-worse": 1.02,
                  "slow-but-good": 1.25})
    found = verdicts(accuracy, load)
    assert {n for n, v in found.items() if v["meets_both"]} == {"fast-and-good"}
    assert found["fast-but-worse"]["within_load_target"] is True
    assert found["fast-but-worse"]["within_accuracy_margin"] is False
    assert found["slow-but-good"]["within_load_target"] is False
    results = {"bench": {"started_at": "now", "items": 4, "max_tokens": 8,
                         "accuracy_profile": "smol", "load_profile": "tiny", "clients": [32],
                         "rounds": 3}, "accuracy": accuracy, "load": load, "verdicts": found}
    text = markdown(results)
    assert "| fast-and-good | 0.27 |" in text and "| 1.08x |" in text
    assert "| 900 | 210 | 1.08x |" in text  # prompt, then what the engine prefilled
    assert "| fast-and-good | 32 | 0.20 | 2.60 | 0.10 | 2.50 |" in text  # the CPU split
    plot(results, tmp_path / "index.png")
    assert (tmp_path / "index.png").stat().st_size > 1000


def test_without_the_load_half_no_variant_is_said_to_meet_the_bar():
    found = verdicts(_accuracy({DEFAULT: 0.3, "other": 0.3}), None)
    assert all(v["within_load_target"] is None and not v["meets_both"]
               for v in found.values())


def test_pooling_takes_every_paired_round_of_every_run_and_each_runs_accuracy(tmp_path):
    import json

    from bench.index.pool import main

    def rounds(*walls):
        return {"rounds": [{"wall_s": w, "ttft_p95_s": w} for w in walls],
                "best": {"prompt_tokens_mean": 600.0}}

    def run(accuracy, vllm, ours):
        return {"accuracy": {"by_variant": {DEFAULT: {"accuracy": accuracy}}},
                "load": {"groups": [{"vllm": {"32": rounds(*vllm)},
                                     DEFAULT: {"32": rounds(*ours)}}]}}

    for name, body in (("a", run(0.3, (1.0, 1.0), (1.2, 1.4))),
                       ("b", run(0.2, (2.0,), (2.2,)))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(body))
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = (tmp_path / "pooled.md").read_text()
    # paired ratios 1.2, 1.4 and 1.1: their median, over three rounds
    assert f"| {DEFAULT} | 0.30, 0.20 | 600 | 1.20x | 1.20x | 3 |" in text
    assert (tmp_path / "pooled.png").stat().st_size > 1000
    assert main([str(tmp_path / "missing")]) == 2


def _rounds(*walls: float) -> dict:
    return {"rounds": [{"wall_s": w, "ttft_p95_s": w} for w in walls],
            "best": {"prompt_tokens_mean": 600.0}}


def test_a_lane_is_also_read_over_vllm_sent_memorys_tokens():
    """vLLM given memory's hidden tokens is a yardstick of its own: a Tandem lane's wall
    over it is what is left once the engine's work on those tokens is taken out; the
    yardstick itself is only read over vLLM."""
    from bench.index.load import MEMORY_TOKENS, to_vllm
    from bench.index.run import _memory_tokens_lines

    servers = {"vllm": {"32": _rounds(1.0, 1.0, 1.0)},
               MEMORY_TOKENS: {"32": _rounds(1.05, 1.06, 1.04)},
               DEFAULT: {"32": _rounds(1.10, 1.12, 1.07)}}
    to = to_vllm(servers)
    assert to[MEMORY_TOKENS]["32"]["wall_ratio_median"] == pytest.approx(1.05)
    assert "wall_over_memory_tokens" not in to[MEMORY_TOKENS]["32"]
    # paired: 1.10/1.05, 1.12/1.06, 1.07/1.04; their median
    assert to[DEFAULT]["32"]["wall_over_memory_tokens"] == pytest.approx(1.10 / 1.05)
    (line,) = [x for x in _memory_tokens_lines({"load": {"to_vllm": to}}) if x]
    assert "wall 1.05x of vLLM" in line and f"{DEFAULT} 1.05x" in line


def test_pooling_reads_each_lane_over_vllm_sent_memorys_tokens_where_a_run_has_it(tmp_path):
    import json

    from bench.index.load import MEMORY_TOKENS
    from bench.index.pool import main

    with_tokens = {"accuracy": {"by_variant": {DEFAULT: {"accuracy": 0.5}}},
                   "load": {"groups": [{"vllm": {"32": _rounds(1.0, 1.0)},
                                        MEMORY_TOKENS: {"32": _rounds(1.1, 1.2)},
                                        DEFAULT: {"32": _rounds(1.21, 1.2)}}]}}
    without = {"accuracy": {"by_variant": {DEFAULT: {"accuracy": 0.5}}},
               "load": {"groups": [{"vllm": {"32": _rounds(1.0)},
                                    DEFAULT: {"32": _rounds(1.3)}}]}}
    for name, body in (("a", with_tokens), ("b", without)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(body))
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = (tmp_path / "pooled.md").read_text()
    # over vLLM: 1.21, 1.2, 1.3 (median 1.21); over memory's tokens: 1.1 and 1.0, run a only
    assert f"| {DEFAULT} | 0.50, 0.50 | 600 | 1.21x | 1.21x | 3 | 1.05x (2) |" in text
    assert f"| {MEMORY_TOKENS} | - | 600 | 1.15x | 1.15x | 2 | - (0) |" in text
