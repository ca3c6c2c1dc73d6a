"""The index bench's runs pooled: `python -m bench.index.pool RUN_DIR [RUN_DIR ...]` writes
`pooled.md` and `pooled.png` beside the runs. Per variant: its strict accuracy in each run
(greedy: the same replies unless the set moved) and its wall and p95 TTFT over plain vLLM
as the median of every paired round of every run (one run's 8-12 rounds resolve about
0.05). Each group's lanes are paired with that group's own vLLM, and where the group has
it with vLLM sent memory's hidden tokens (runs from 2026-12-05 05:00 on)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.index.load import EMPTY, MEMORY_TOKENS
from bench.index.run import ACCURACY_MARGIN, LOAD_TARGET
from bench.index.variants import DEFAULT
from bench.load.run import paired_ratios


def pooled(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per lane: accuracies (one a run), every paired wall and TTFT ratio, mean prompt."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        for name, lane in run["accuracy"]["by_variant"].items():
            out.setdefault(name, _empty())["accuracy"].append(lane["accuracy"])
        for group in (run.get("load") or {}).get("groups", ()):
            for lane, by_clients in group.items():
                if lane == "vllm":
                    continue
                for clients, figures in by_clients.items():
                    walls, ttfts = paired_ratios(figures["rounds"],
                                                 group["vllm"][clients]["rounds"])
                    entry = out.setdefault(lane, _empty())
                    entry["walls"] += walls
                    entry["ttfts"] += ttfts
                    entry["prompts"].append(figures["best"]["prompt_tokens_mean"])
                    if MEMORY_TOKENS in group and lane != MEMORY_TOKENS:
                        entry["over_tokens"] += paired_ratios(
                            figures["rounds"], group[MEMORY_TOKENS][clients]["rounds"])[0]
    for entry in out.values():
        for key, values in (("wall_ratio_median", entry["walls"]),
                            ("ttft_p95_ratio_median", entry["ttfts"]),
                            ("wall_over_memory_tokens", entry["over_tokens"])):
            entry[key] = statistics.median(values) if values else None
    return out


def _empty() -> dict[str, Any]:
    return {"accuracy": [], "walls": [], "ttfts": [], "prompts": [], "over_tokens": []}


def markdown(table: dict[str, dict[str, Any]], sources: list[str]) -> str:
    base = table.get(DEFAULT, {}).get("accuracy") or [None]
    lines = [f"# The index bench, pooled over {', '.join(sources)}", "",
             f"Bars: wall and p95 TTFT within {LOAD_TARGET:.2f}x of vLLM, accuracy within "
             f"{ACCURACY_MARGIN:.2f} of `{DEFAULT}` (lowest run: {min(base):.2f}).", "",
             "| lane | strict accuracy (each run) | load prompt tokens | wall / vLLM | "
             "p95 TTFT / vLLM | paired rounds | wall / vLLM sent memory's tokens (rounds) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, entry in table.items():
        accuracy = ", ".join(f"{a:.2f}" for a in entry["accuracy"]) or "-"
        prompt = f"{statistics.fmean(entry['prompts']):.0f}" if entry["prompts"] else "-"
        lines.append(f"| {name} | {accuracy} | {prompt} | {_ratio(entry['wall_ratio_median'])}"
                     f" | {_ratio(entry['ttft_p95_ratio_median'])} | {len(entry['walls'])} | "
                     f"{_ratio(entry['wall_over_memory_tokens'])} "
                     f"({len(entry['over_tokens'])}) |")
    return "\n".join(lines) + "\n"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def plot(table: dict[str, dict[str, Any]], path: Path) -> None:
    """Strict accuracy against pooled wall over vLLM, a point a variant (whiskers: the
    middle half of its paired rounds), the two bars as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for name, entry in table.items():
        if not entry["walls"] or not entry["accuracy"] or name == EMPTY:
            continue
        walls = sorted(entry["walls"])
        low, high = walls[len(walls) // 4], walls[(3 * len(walls)) // 4]
        x, y = entry["wall_ratio_median"], statistics.fmean(entry["accuracy"])
        ax.errorbar([x], [y], xerr=[[x - low], [high - x]], fmt="o", capsize=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    if EMPTY in table and table[EMPTY]["wall_ratio_median"]:
        ax.axvline(table[EMPTY]["wall_ratio_median"], color="#888", linestyle=":",
                   label="memory on, no notes")
    ax.axvline(LOAD_TARGET, color="#c33", linestyle="--", label=f"{LOAD_TARGET}x vLLM")
    base = table.get(DEFAULT, {}).get("accuracy")
    if base:
        ax.axhline(min(base) - ACCURACY_MARGIN, color="#36c", linestyle="--",
                   label=f"old default - {ACCURACY_MARGIN}")
    ax.set_xlabel("wall / plain vLLM, 32 clients (median of paired rounds)")
    ax.set_ylabel("strict accuracy (smol)")
    ax.set_title("What the index costs and buys: each variant")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench.index.pool RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    folders = [Path(a) for a in argv]
    missing = [str(f) for f in folders if not (f / "results.json").is_file()]
    if missing:
        print(f"no results.json in {', '.join(missing)}", file=sys.stderr)
        return 2
    table = pooled([json.loads((f / "results.json").read_text()) for f in folders])
    out = folders[0].parent
    text = markdown(table, [f.name for f in folders])
    (out / "pooled.md").write_text(text)
    plot(table, out / "pooled.png")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
