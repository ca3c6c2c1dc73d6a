"""The external run's summary.md and plot: each set's table (sparse, dense, the served
hybrid, the chosen rule, every rule weighed), the goals on the held-out sets, the cost,
and the quality bench's strict figures before and after when the run carries them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import write_run

TITLES = {"own/dev": "own set, dev half (chosen here)", "own/test": "own set, test half",
          "locomo/all": "LoCoMo (public, all 1,536)", "realtalk/all": "REALTALK (public, all)",
          "first/test": "first (Markdown) set, test half"}


def _row(label: str, cells: dict[str, float], cell: str) -> str:
    return f"| {label} | {cells[f'{cell}@5']:.3f} | {cells[f'{cell}@10']:.3f} |"


def set_table(results: dict[str, Any], cell: str) -> list[str]:
    figures, chosen = results["figures"], results["chosen"]
    lines = [f"#### {TITLES[cell]}", "", "| rule | recall@5 | recall@10 |",
             "| --- | ---: | ---: |"]
    for rule in ("sparse", "dense", "hybrid"):
        label = f"hybrid (served: {results['served_hybrid']})" if rule == "hybrid" else rule
        lines.append(_row(label, figures[rule], cell))
    lines.append(_row(f"**chosen: {chosen}**", figures[chosen], cell))
    for rule in results["rules"][3:]:
        if rule != chosen:
            lines.append(_row(rule, figures[rule], cell))
    return [*lines, ""]


def summary(results: dict[str, Any]) -> str:
    sets, chosen = results["sets"], results["chosen"]
    lines = ["## Fusion on conversational memory nobody here wrote "
             "(`python -m bench.search.external`)", "",
             f"Embedder {results['embedder']}; rankings 50 deep. Sets: own "
             f"{sets['own']['questions']} questions over {sets['own']['turns']} turns; "
             f"LoCoMo {sets['locomo']['questions']} over {sets['locomo']['turns']} turns; "
             f"REALTALK {sets['realtalk']['questions']} over {sets['realtalk']['turns']} "
             "turns (a turn: two messages, a section each).", "",
             f"**Chosen on {results['chosen_on']} alone: {chosen}** (of the transferable "
             f"rules, {len(results['held_on_choice_set'])} held there within "
             f"{results['tolerance']} of the better single mode at 5 and 10: "
             f"{', '.join(results['held_on_choice_set']) or 'none'}).", "",
             "Goals on the sets not chosen on: recall@5 >= the better single mode - "
             f"{results['tolerance']}, recall@10 >= {results['recall10_goal']}.", "",
             "| set | chosen @5 | better single @5 | holds | chosen @10 | >= goal |",
             "| --- | ---: | ---: | :---: | ---: | :---: |"]
    for cell, g in results["goals"].items():
        lines.append(f"| {TITLES[cell]} | {g['at5']:.3f} | {g['best_single_at5']:.3f} | "
                     f"{'yes' if g['at5_holds'] else 'no'} | {g['at10']:.3f} | "
                     f"{'yes' if g['at10_holds'] else 'no'} |")
    lines += ["", "### Each set", ""]
    for cell in ("own/dev", "own/test", "locomo/all", "realtalk/all", "first/test"):
        lines += set_table(results, cell)
    lines += ["### Recall@10 by the public sets' question categories", ""]
    for name, rows in results["recall10_by_category"].items():
        cats = list(next(iter(rows.values())))
        lines += ["| rule | " + " | ".join(f"{name} cat. {c}" for c in cats) + " |",
                  "| --- | " + " | ".join("---:" for _ in cats) + " |"]
        for rule, row in rows.items():
            lines.append(f"| {rule} | " + " | ".join(f"{row[c]:.3f}" for c in cats) + " |")
        lines.append("")
    speed, rerank = results["latency"], results["rerank_cost"]
    lines += ["### Cost", "",
              f"A served hybrid query (embedding included) over all ten LoCoMo conversations "
              f"in one index ({speed['turns']} turns, {speed['chunks']} chunks), "
              f"{speed['queries']} questions: p50 {speed['p50_ms']:.1f} ms, "
              f"**p95 {speed['p95_ms']:.1f} ms** (goal <= {results['p95_goal_ms']:g} ms; "
              f"the machine's 1-minute load average then: {speed['load_average_1m']:.1f} "
              "on 2 cores). The calling thread's own CPU time a query: p50 "
              f"{speed['thread_cpu_p50_ms']:.1f} ms, p95 {speed['thread_cpu_p95_ms']:.1f} "
              "ms (what remains of the tail without the waits for a core).",
              "",
              f"A cross-encoder of MiniLM-L6's size over {rerank['hits']} hits would add "
              f"p50 {rerank['p50_ms']:.1f} ms, p95 {rerank['p95_ms']:.1f} ms a query "
              "(timed with MiniLM's own forward pass; no registry package ships such a "
              "cross-encoder's weights).", ""]
    if results.get("quality"):
        lines += quality_lines(results["quality"])
    return "\n".join(lines)


def quality_lines(quality: dict[str, Any]) -> list[str]:
    lines = ["### The quality bench, strict judge, before and after", "",
             quality.get("note", ""), "",
             "| lane | " + " | ".join(quality["runs"]) + " |",
             "| --- | " + " | ".join("---:" for _ in quality["runs"]) + " |"]
    lanes = list(next(iter(quality["runs"].values())))
    for lane in lanes:
        lines.append(f"| {lane} | " + " | ".join(
            "-" if run.get(lane) is None else f"{run[lane]:.2f}"
            for run in quality["runs"].values()) + " |")
    return [*lines, ""]


def plot(results: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = ("own/test", "locomo/all", "realtalk/all")
    shown = ["sparse", "dense", results["rules"][-2], results["chosen"]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    for ax, cut in zip(axes, (5, 10), strict=True):
        width = 0.8 / len(shown)
        for n, rule in enumerate(shown):
            label = "previous (rrf k=5 dense x4)" if rule == results["rules"][-2] else rule
            ax.bar([i + n * width for i in range(len(cells))],
                   [results["figures"][rule][f"{c}@{cut}"] for c in cells], width,
                   label=label)
        ax.set_xticks([i + 1.5 * width for i in range(len(cells))],
                      [c.split("/")[0] for c in cells])
        ax.set_ylim(0, 1.05)
        ax.set_title(f"recall@{cut} on sets not chosen on")
        ax.legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "external_recall.png")
    plt.close(fig)


def write(results: dict[str, Any], out: Path) -> str:
    return write_run(out, results, summary(results), lambda folder: plot(results, folder))
