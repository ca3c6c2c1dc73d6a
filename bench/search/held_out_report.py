"""The held-out run's summary.md and plot: recall on the test halves, by mode and set,
for each embedder, the rule chosen on the dev halves, and what each embedder costs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import write_run

SHOWN = ("sparse", "dense", "hybrid")


def summary(results: dict[str, Any]) -> str:
    lines = ["## Search on held-out questions (`python -m bench.search.held_out`)", "",
             "Recall on the **test** halves (what no rule was chosen on); `hybrid` is the "
             "served fusion (`conductor/search/fusion.py`), `chosen` the rule the dev halves "
             "pick for that embedder.", ""]
    for name, run in results["embedders"].items():
        counts = run["questions"]
        lines += [f"### {name} ({run['version']})", "",
                  f"{counts['conversational']['test']} conversational and "
                  f"{counts['first']['test']} first-set test questions "
                  f"({counts['conversational']['dev']} and {counts['first']['dev']} dev).", "",
                  "| mode | conv. @5 | conv. @10 | first @5 | first @10 |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        rows = [*SHOWN, run["chosen"]] if run["chosen"] not in SHOWN else list(SHOWN)
        for mode in rows:
            cells = run["figures"][mode]
            label = f"chosen: {mode}" if mode == run["chosen"] else mode
            lines.append(f"| {label} | " + " | ".join(
                f"{cells[f'{s}/test@{cut}']:.3f}" for s in ("conversational", "first")
                for cut in (5, 10)) + " |")
        kinds = run["test_by_kind_at_10"]
        order = sorted(kinds["dense"])
        lines += ["", "Conversational test recall@10 by kind:", "",
                  "| mode | " + " | ".join(order) + " |",
                  "| --- | " + " | ".join("---:" for _ in order) + " |"]
        for mode, row in kinds.items():
            lines.append(f"| {mode} | " + " | ".join(f"{row[k]:.2f}" for k in order) + " |")
        cost = run["cost"]
        lines += ["", f"Cost: {cost['s_per_1000_turns']:.1f} s to index 1,000 turns "
                  f"({cost['turns']} turns in {cost['index_s']:.1f} s); a query's embedding "
                  f"p50 {cost['embed_p50_ms']:.1f} ms, p95 {cost['embed_p95_ms']:.1f} ms.", ""]
    return "\n".join(lines)


def plot(results: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    embedders = list(results["embedders"])
    fig, axes = plt.subplots(1, len(embedders), figsize=(5 * len(embedders), 4), dpi=100,
                             squeeze=False)
    cells = [(s, cut) for s in ("conversational", "first") for cut in (5, 10)]
    for ax, name in zip(axes[0], embedders, strict=True):
        figures = results["embedders"][name]["figures"]
        width = 0.8 / len(SHOWN)
        for n, mode in enumerate(SHOWN):
            ax.bar([i + n * width for i in range(len(cells))],
                   [figures[mode][f"{s}/test@{cut}"] for s, cut in cells], width, label=mode)
        ax.set_xticks([i + width for i in range(len(cells))],
                      [f"{'conv.' if s == 'conversational' else s} @{cut}" for s, cut in cells])
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{name}: recall on the test halves")
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(folder / "held_out_recall.png")
    plt.close(fig)


def write(results: dict[str, Any], out: Path) -> str:
    return write_run(out, results, summary(results), lambda folder: plot(results, folder))
