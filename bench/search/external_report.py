"""The external run's summary.md and plots: each set's table (sparse, dense, the served
hybrid, the chosen rule, every rule weighed), the goals on the held-out sets, what bounds
recall@10 (the union of the two rankings) and the LoCoMo variants beside it, the cost,
and the quality bench's strict figures before and after when the run carries them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import write_run
from bench.search.external_sets import LAYOUTS

TITLES = {"own/dev": "own set, dev half (chosen here)", "own/test": "own set, test half",
          "locomo/all": "LoCoMo (public, all 1,536)",
          "madial/all": "MADial-Bench (public, all 160)",
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
             f"LoCoMo {sets['locomo']['questions']} over {sets['locomo']['turns']} turns "
             "(a turn: two messages, a section each)"
             + (f"; MADial-Bench {sets['madial']['questions']} dialogues over "
                f"{sets['madial']['turns']} archived events (an event a turn)"
                if "madial" in sets else "") + ".", "",
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
    for cell in (c for c in TITLES if c in results["ceiling"]):
        lines += set_table(results, cell)
    lines += ["### Recall@10 by the public sets' question categories", ""]
    for name, rows in results["recall10_by_category"].items():
        cats = list(next(iter(rows.values())))
        lines += ["| rule | " + " | ".join(f"{name} cat. {c}" for c in cats) + " |",
                  "| --- | " + " | ".join("---:" for _ in cats) + " |"]
        for rule, row in rows.items():
            lines.append(f"| {rule} | " + " | ".join(f"{row[c]:.3f}" for c in cats) + " |")
        lines.append("")
    lines += ceiling_lines(results)
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

    cells = tuple(c for c in ("own/test", "locomo/all", "madial/all")
                  if f"{c}@5" in results["figures"]["dense"])
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


def ceiling_lines(results: dict[str, Any]) -> list[str]:
    """The bound on recall@10 per set, and the LoCoMo variants beside it."""
    goal = results["recall10_goal"]
    lines = ["### What any fusion could reach at 10 (`ceiling.py`)", "",
             "A fusion only reorders the hits the two rankings hold. `union50 @10` is the "
             "best recall@10 of any reordering of the two 50-deep lists (what the served "
             "fusion reads): no rule over these rankings can pass it. `union10 @10` "
             "reorders the two top 10s; `either @10` picks the better mode per question "
             "knowing the answer; `in union50` is the evidence in the 50-deep union at all.",
             "", "| set | hybrid @10 | either @10 | union10 @10 | union50 @10 | in union50 |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for cell, title in ((c, t) for c, t in TITLES.items() if c in results["ceiling"]):
        c = results["ceiling"][cell]
        lines.append(f"| {title} | {results['figures']['hybrid'][f'{cell}@10']:.3f} | "
                     f"{c['either_at10']:.3f} | {c['union10_at10']:.3f} | "
                     f"{c['union50_at10']:.3f} | {c['union50_recall']:.3f} |")
    lines += ["", "#### LoCoMo: layouts of a chat and a larger embedder, side by side", "",
              "Each row indexes LoCoMo's ten conversations again and serves every question "
              "as the server would (hybrid: the served z-score fusion). Layouts: "
              + "; ".join(f"`{k}`: {v}" for k, v in LAYOUTS.items()) + ". Embedders: "
              "all-MiniLM-L6-v2 (served), all-mpnet-base-v2 (768 dimensions, the "
              "registry's larger sentence model). Goal: recall@10 >= "
              f"{goal}.", "",
              "| variant | questions | turns | sparse @5/@10 | dense @5/@10 | hybrid @5/@10 | "
              "union50 @10 | in union50 | s |", "| --- | ---: | ---: | ---: | ---: | ---: "
              "| ---: | ---: | ---: |"]
    for name, v in results["variants"].items():
        f = v["figures"]
        turns = results["sets"]["locomo"]["turns"] if v["turns"] is None else v["turns"]
        lines.append(f"| {name} | {v['questions']} | {turns} | "
                     f"{f['sparse@5']:.3f} / {f['sparse@10']:.3f} | "
                     f"{f['dense@5']:.3f} / {f['dense@10']:.3f} | **{f['hybrid@5']:.3f} / "
                     f"{f['hybrid@10']:.3f}** | {f['union50_at10']:.3f} | "
                     f"{f['union50_recall']:.3f} | {v['seconds']:.0f} |")
    return [*lines, ""]


def plot_ceiling(results: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["variants"])
    shown = [("sparse@10", "BM25"), ("dense@10", "dense"), ("hybrid@10", "hybrid (served)"),
             ("union50_at10", "ceiling: best reordering of the union")]
    fig, ax = plt.subplots(figsize=(11, 4.5), dpi=100)
    width = 0.8 / len(shown)
    for n, (key, label) in enumerate(shown):
        ax.bar([i + n * width for i in range(len(names))],
               [results["variants"][v]["figures"][key] for v in names], width, label=label)
    ax.axhline(results["recall10_goal"], color="black", linestyle="--", linewidth=1,
               label=f"goal {results['recall10_goal']}")
    ax.set_xticks([i + 1.5 * width for i in range(len(names))], names, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title("LoCoMo recall@10: each variant and what any fusion of its rankings could reach")
    ax.legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "locomo_ceiling.png")
    plt.close(fig)


def write(results: dict[str, Any], out: Path) -> str:
    def plots(folder: Path) -> None:
        plot(results, folder)
        plot_ceiling(results, folder)

    return write_run(out, results, summary(results), plots)
