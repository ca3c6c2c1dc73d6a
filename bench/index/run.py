"""`tandem bench --index`: what the notes' index costs under load, and what it buys.

The hidden context shows a user's notes twice: an index in the shared context (cached,
but read by attention at every step of every request) and the notes a message matches
after it (prefilled with the message). Each variant (bench/index/variants.py) sets how much
of each is shown and in which format. Two halves, one after the other:

* accuracy (bench/index/accuracy.py): the quality bench's questions on a model that speaks
  (`smol` by default), memory on, one lane a variant, judged strictly;
* load (bench/index/load.py): the load bench's 32 clients on the tiny model against plain
  vLLM, one server a variant, for a user who holds the same notes.

A variant meets the bar when its paired wall and p95 TTFT ratios to vLLM are within
`LOAD_TARGET` at every client count and its accuracy is within `ACCURACY_MARGIN` of the
default's before this bench. Writes results.json, summary.md and index.png.
"""

from __future__ import annotations

import asyncio
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.index.accuracy import measure_accuracy
from bench.index.load import EMPTY, MEMORY_TOKENS, measure_load
from bench.index.variants import DEFAULT, QUICK_VARIANTS, VARIANTS, Variant, variant_named
from bench.paths import RESULTS_DIR
from bench.quality.facts import FACTS, ITEM_KINDS, load_facts
from bench.report import write_run
from engine.profiles import Profile

RESULTS = RESULTS_DIR / "index"
LOAD_TARGET = 1.10  # memory on over plain vLLM, wall and p95 TTFT (issue 23's target)
ACCURACY_MARGIN = 0.05  # below the default's strict accuracy
FULL_TOKENS, QUICK_TOKENS, QUICK_ITEMS = 40, 8, 4
LOAD_NOTES = 40  # the load half's user holds the 40 single-note facts (issue 37's store)
PLOT = "index.png"


def say(message: str) -> None:
    print(f"[index bench] {message}", flush=True)


def verdicts(accuracy: dict[str, Any], load: dict[str, Any] | None) -> dict[str, Any]:
    """Per variant: its accuracy, its load ratios and whether it meets both bars."""
    base = accuracy["by_variant"][DEFAULT]["accuracy"] if DEFAULT in accuracy[
        "by_variant"] else None
    out: dict[str, Any] = {}
    for name, lane in accuracy["by_variant"].items():
        ratios = (load or {}).get("to_vllm", {}).get(name, {})
        fast = bool(ratios) and all(
            r.get("wall_ratio_median", 99) <= LOAD_TARGET
            and (r.get("ttft_p95_ratio_median") or 0) <= LOAD_TARGET for r in ratios.values())
        accurate = (base is not None and lane["accuracy"] is not None
                    and lane["accuracy"] >= base - ACCURACY_MARGIN)
        out[name] = {"accuracy": lane["accuracy"], "load": ratios,
                     "within_load_target": fast if ratios else None,
                     "within_accuracy_margin": accurate, "meets_both": fast and accurate}
    return out


def markdown(results: dict[str, Any]) -> str:
    bench = results["bench"]
    lines = [f"# What the index costs, and what it buys ({bench['started_at']})", "",
             f"Accuracy: {bench['items']} questions on `{bench['accuracy_profile']}`, strict "
             f"judge, at most {bench['max_tokens']} tokens. Load: "
             f"{', '.join(map(str, bench['clients']))} clients on `{bench['load_profile']}`, "
             f"{bench['rounds']} rounds, paired medians over plain vLLM. Bars: load within "
             f"{LOAD_TARGET:.2f}x, accuracy within {ACCURACY_MARGIN:.2f} of `{DEFAULT}`.", "",
             "| variant | strict accuracy | single | updated | several notes | copies "
             "markup | prompt tokens (accuracy) | load prompt tokens | load prefilled "
             "tokens | wall / vLLM | p95 TTFT / vLLM | meets both |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| --- |"]
    accuracy = results["accuracy"]["by_variant"]
    for name, verdict in results["verdicts"].items():
        lane = accuracy[name]
        kinds = [_num(lane["by_kind"].get(k)) for k in ITEM_KINDS]
        load = list(verdict["load"].values())
        lines.append(
            f"| {name} | {_num(lane['accuracy'])} | {' | '.join(kinds)} | "
            f"{lane['copies_markup']} | {lane['prompt_tokens_mean']:.0f} | "
            + " | ".join([
                "/".join(f"{r['prompt_tokens_mean']:.0f}" for r in load) or "-",
                "/".join(_tokens(r.get("uncached_tokens")) for r in load) or "-",
                "/".join(_ratio(r.get("wall_ratio_median")) for r in load) or "-",
                "/".join(_ratio(r.get("ttft_p95_ratio_median")) for r in load) or "-",
                "yes" if verdict["meets_both"] else "no"]) + " |")
    lines += _cpu_table(results)
    empty = (results.get("load") or {}).get("to_vllm", {}).get(EMPTY)
    if empty:
        lines += ["", "Memory on with an empty store: wall "
                  + "/".join(_ratio(r.get("wall_ratio_median")) for r in empty.values())
                  + ", p95 TTFT "
                  + "/".join(_ratio(r.get("ttft_p95_ratio_median")) for r in empty.values())
                  + " of vLLM; prefilled "
                  + "/".join(_tokens(r.get("uncached_tokens")) for r in empty.values())
                  + " tokens a request, vLLM "
                  + "/".join(_tokens(r.get("vllm_uncached_tokens")) for r in empty.values())
                  + " (the load prefilled column: the prompt less what the prefix cache"
                  " held)."]
    lines += _memory_tokens_lines(results)
    return "\n".join(lines) + "\n"


def _memory_tokens_lines(results: dict[str, Any]) -> list[str]:
    """vLLM sent memory's hidden tokens, and each Tandem lane over it: a lane's wall over
    vLLM split into what those tokens cost the engine and what is left (the server's own
    work and the tokens past them: the index, the matched notes)."""
    to = (results.get("load") or {}).get("to_vllm", {})
    tokens = to.get(MEMORY_TOKENS)
    if not tokens:
        return []
    over = [f"{lane} " + "/".join(_ratio(r.get("wall_over_memory_tokens"))
                                  for r in by.values())
            for lane, by in to.items() if lane != MEMORY_TOKENS]
    return ["", "vLLM sent the tokens memory on hides in every prompt (the engine's tools "
            "and the memory card, as plain request parts: "
            + "/".join(f"{r['prompt_tokens_mean']:.0f}" for r in tokens.values())
            + " prompt tokens a request): wall "
            + "/".join(_ratio(r.get("wall_ratio_median")) for r in tokens.values())
            + " of vLLM, what those tokens cost the engine. Each lane's wall over that "
            "lane (paired medians), what is left: the server's own work and the tokens "
            "past them: " + ", ".join(over) + "."]


def _cpu_table(results: dict[str, Any]) -> list[str]:
    """Where a round's time goes, per lane beside its vLLM (rounds' medians): CPU seconds
    of the server's own process and of its engine processes."""
    to = (results.get("load") or {}).get("to_vllm", {})
    rows = [(lane, clients, r) for lane, by in to.items() for clients, r in by.items()
            if r.get("server_cpu_s") is not None]
    if not rows:
        return []
    lines = ["", "CPU seconds a round (medians; the server's own process, its engine's; "
             "on this CPU machine both share the cores, so a round's wall is about their "
             "sum over the cores):", "",
             "| lane | clients | server CPU s | engine CPU s | vLLM's server CPU s | "
             "vLLM's engine CPU s |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for lane, clients, r in rows:
        lines.append(f"| {lane} | {clients} | {_num(r['server_cpu_s'])} | "
                     f"{_num(r['engine_cpu_s'])} | {_num(r.get('vllm_server_cpu_s'))} | "
                     f"{_num(r.get('vllm_engine_cpu_s'))} |")
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def plot(results: dict[str, Any], path: Path) -> None:
    """Left: strict accuracy a variant, the bar below the default's. Right: wall over vLLM
    a variant under load (the paired median, whiskers from the least to the most paired
    round), the 1.10x line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    verdicts_ = results["verdicts"]
    names = list(verdicts_)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    left.bar(names, [verdicts_[n]["accuracy"] or 0.0 for n in names], color="#2a7")
    base = verdicts_.get(DEFAULT, {}).get("accuracy")
    if base is not None:
        left.axhline(base - ACCURACY_MARGIN, color="#c33", linestyle="--",
                     label=f"default - {ACCURACY_MARGIN}")
        left.legend()
    left.set_ylim(0, 1)
    left.set_title(f"strict accuracy ({results['bench']['accuracy_profile']})")
    load = (results.get("load") or {}).get("to_vllm", {})
    for offset, clients in enumerate(results["bench"]["clients"]):
        key = str(clients)
        shown = [n for n in names if key in load.get(n, {})]
        walls = [load[n][key]["wall_ratios"] for n in shown]
        medians = [load[n][key]["wall_ratio_median"] for n in shown]
        xs = [names.index(n) + offset * 0.3 for n in shown]
        right.errorbar(xs, medians, yerr=[[m - min(w) for m, w in zip(medians, walls,
                                                                     strict=True)],
                                          [max(w) - m for m, w in zip(medians, walls,
                                                                      strict=True)]],
                       fmt="o", capsize=3, label=f"{clients} clients")
    right.axhline(LOAD_TARGET, color="#c33", linestyle="--", label=f"{LOAD_TARGET}x")
    for clients, figures in load.get(EMPTY, {}).items():
        right.axhline(figures["wall_ratio_median"], color="#888", linestyle=":",
                      label=f"no notes, {clients} clients")
    right.set_xticks(range(len(names)), names)
    right.set_title(f"wall / plain vLLM under load ({results['bench']['load_profile']})")
    right.legend()
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_index_bench(accuracy_profile: Profile, load_profile: Profile | None,
                    out: Path | None = None, quick: bool = False,
                    client_counts: list[int] | None = None, rounds: int = 8,
                    names: list[str] | None = None) -> dict[str, Any]:
    """The accuracy half on `accuracy_profile`'s engine, then (unless `load_profile` is
    None) the load half on `load_profile`'s servers; the report. `names`: the variants to
    run (default: all; the default variant is always among them, as the yardstick)."""
    from engine.engine import Engine
    from engine.home import tandem_home

    variants: tuple[Variant, ...] = QUICK_VARIANTS if quick else VARIANTS
    if names:
        variants = tuple(variant_named(n) for n in dict.fromkeys([DEFAULT, *names]))
    facts = load_facts(FACTS)[:QUICK_ITEMS] if quick else load_facts(FACTS)
    tokens = QUICK_TOKENS if quick else FULL_TOKENS
    clients = client_counts or ([4] if quick else [32])
    rounds = 1 if quick else rounds
    started = datetime.now().isoformat(timespec="seconds")

    async def accuracy_half() -> dict[str, Any]:
        say(f"starting the engine: profile {accuracy_profile.name}")
        engine = await Engine.start(accuracy_profile, tandem_home(), progress=say)
        try:
            with tempfile.TemporaryDirectory(prefix="tandem-index-") as tmp:
                return await measure_accuracy(engine, Path(tmp), facts, variants, tokens, say)
        finally:
            engine.shutdown()

    accuracy = asyncio.run(accuracy_half())
    load = None
    if load_profile is not None:
        with tempfile.TemporaryDirectory(prefix="tandem-index-load-") as tmp:
            load = measure_load(load_profile, facts[:LOAD_NOTES], variants, clients, rounds,
                                Path(tmp), say)
    results = {"bench": {"started_at": started, "items": len(facts), "max_tokens": tokens,
                         "accuracy_profile": accuracy_profile.name,
                         "load_profile": load_profile.name if load_profile else None,
                         "clients": clients, "rounds": rounds,
                         "variants": {v.name: {"notes_shown": dict(v.notes_shown),
                                               "about": v.about} for v in variants}},
               "accuracy": accuracy, "load": load}
    results["verdicts"] = verdicts(accuracy, load)
    target = out or RESULTS
    print(write_run(target, results, markdown(results),
                    lambda folder: plot(results, folder / PLOT)), flush=True)
    say(f"results in {target}")
    return results
