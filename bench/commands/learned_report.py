"""`bench.commands.learned`'s report: summary.md and the precision/recall-against-threshold
plot of the leave-one-set-out folds (`pr-threshold.png`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

FOLD_COLOURS = {"dev": "#1b9e77", "test": "#d95f02", "holdout": "#7570b3"}


def load_average() -> float:
    """The one-minute load average (the machine is shared: a timing needs it beside it)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def plot(grid: dict, chosen_key: str, path: Path) -> None:
    """One panel a method, the chosen model's (or, with the rules chosen, the first
    model's): each fold's precision (solid) and recall (dashed) against the threshold,
    the goals in black."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for k, e in grid.items() if k != "rules"]
    model = grid[chosen_key]["model"] if chosen_key != "rules" else entries[0]["model"]
    methods = list(dict.fromkeys(e["method"] for e in entries))
    fig, axes = plt.subplots(1, len(methods), figsize=(4 * len(methods), 3.4), sharey=True,
                             squeeze=False)
    for ax, method in zip(axes[0], methods, strict=True):
        series: dict[str, list[tuple[float, float, float]]] = {}
        for e in entries:
            if e["method"] == method and e["model"] == model:
                for fold, s in e["per_fold"].items():
                    series.setdefault(fold, []).append(
                        (e["threshold"], s["precision"], s["recall"]))
        for fold, points in series.items():
            points.sort()
            ts = [t for t, _, _ in points]
            ax.plot(ts, [p for _, p, _ in points], color=FOLD_COLOURS[fold],
                    label=f"{fold} held out: precision")
            ax.plot(ts, [r for _, _, r in points], color=FOLD_COLOURS[fold], linestyle="--",
                    label=f"{fold} held out: recall")
        ax.axhline(0.99, color="black", linewidth=0.6, linestyle=":")
        ax.axhline(0.95, color="black", linewidth=0.6, linestyle="-.")
        ax.set_title(method, fontsize=10)
        ax.set_xlabel("threshold")
        ax.set_ylim(0.4, 1.02)
    axes[0][0].set_ylabel("writes (goals 0.99, 0.95)")
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Leave-one-set-out folds, model {model}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _row(name: str, s: dict) -> str:
    name = name.replace(" | ", "; ")  # the grid's keys: method | model | threshold
    return (f"| {name} | {s['precision']:.3f} | {s['recall']:.3f} | {s['flagged']} | "
            f"{s['right']} | {s['labelled']} |")


def _needed(curve: list[dict], key: str, goal: float) -> str:
    """Training messages for `key` to reach `goal` if the error falls as a power of the
    size, fitted over the curve's sized points (log error against log size)."""
    points = [(math.log(p["train_size"]), math.log(max(1e-3, 1 - p[key])))
              for p in curve if isinstance(p["train_size"], int)]
    if len(points) < 2:
        return "n/a"
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    if slope >= 0:
        return f"never (its error does not fall with size: slope {slope:+.2f})"
    n = math.exp(mx + (math.log(1 - goal) - my) / slope)
    return f"about {n:,.0f} (error ∝ size^{slope:.2f})"


def summary(results: dict) -> str:
    grid, chosen = results["grid"], results["chosen"]
    load = results["load_average"]
    lines = [f"# A learned recogniser of memory commands ({results['when']})", "",
             f"`python -m bench.commands.learned`, {results['seconds']} s, load average "
             f"{load['start']:.1f} at the start and {load['end']:.1f} at the end (2 cores, "
             "shared). No generative model: logistic regression (numpy) over hashed "
             "n-grams, all-MiniLM-L6-v2 vectors, or both. Figures are for the commands "
             "that write (remember, forget, update): right only with the labelled kind.",
             "", "## Protocol (fixed before the fourth set was scored)", ""]
    for paragraph in results["protocol"]:  # a numbered step a line
        lines += [" ".join(step.split()) for step in re.split(r"\n(?=\d\. )", paragraph)]
        lines.append("")
    lines += ["## Leave-one-set-out (dev, test, holdout)", "",
              "Each fold's rules: " + ", ".join(f"{k}: {v}" for k, v in
                                                 results["fold_rules"].items())
              + f" (in-sample on {', '.join(results['in_sample_folds'])}).", "",
              "| method | pooled precision | pooled recall | flagged | right | labelled |",
              "| --- | ---: | ---: | ---: | ---: | ---: |", _row("rules", grid["rules"]["pooled"])]
    rules_recall = grid["rules"]["pooled"]["recall"]
    by_model: dict[str, list[dict]] = {}
    for key, e in grid.items():
        if key != "rules":
            by_model.setdefault(f"{e['method']}; {e['model']}", []).append(e)
    lines += ["", "Each method and model at two of its thresholds: the highest precision with "
              "recall at least the rules' (none: it never keeps their recall), and the "
              "highest precision at any threshold that flags something:", "",
              "| method and model | recall >= rules': t, P, R | highest precision: t, P, R |",
              "| --- | --- | --- |"]
    for name, entries in by_model.items():
        def point(e: dict | None) -> str:
            if e is None:
                return "none"
            s = e["pooled"]
            return f"{e['threshold']}, {s['precision']:.3f}, {s['recall']:.3f}"
        kept = [e for e in entries if e["pooled"]["recall"] >= rules_recall]
        top = max(kept, key=lambda e: (e["pooled"]["precision"], e["pooled"]["recall"]),
                  default=None)
        sharp = max((e for e in entries if e["pooled"]["flagged"]),
                    key=lambda e: (e["pooled"]["precision"], e["pooled"]["recall"]),
                    default=None)
        lines.append(f"| {name} | {point(top)} | {point(sharp)} |")
    lines += ["", "(Every threshold is in results.json; pr-threshold.png plots the chosen "
              "model's, per fold.)", "",
              f"Chosen: **{chosen}**.", ""]
    if chosen != "rules":
        lines += ["Per fold:", "", "| fold | rules P | rules R | chosen P | chosen R |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for fold, s in grid[chosen]["per_fold"].items():
            r = grid["rules"]["per_fold"][fold]
            lines.append(f"| {fold} | {r['precision']:.3f} | {r['recall']:.3f} | "
                         f"{s['precision']:.3f} | {s['recall']:.3f} |")
        lines.append("")
    lines += ["## The fourth set, scored once (messages-fourth.tsv, never tuned on)", "",
              "| method | precision | recall | flagged | right | labelled |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [_row(k, s) for k, s in results["fourth"].items()]
    for key, s in results["fourth"].items():
        if s.get("false_positives"):
            lines += ["", f"False positives of {key}:", ""]
            lines += [f"- {f['said']} for `{f['text'][:80]}` (labelled {f['label']})"
                      for f in s["false_positives"]]
    lines += ["", "## Cost a message (median ms, one message at a time, this machine)", "",
              "| method | ms |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.2f} |" for k, v in results["cost_ms"].items()]
    for name, curve in results["learning_curve"].items():
        lines += ["", f"## Learning curve: {name} (pooled over the folds)", "",
                  "| training messages (each fold) | precision | recall |",
                  "| ---: | ---: | ---: |"]
        lines += [f"| {p['train_size']} | {p['precision']:.3f} | {p['recall']:.3f} |"
                  for p in curve]
        lines += ["", f"Training messages for precision 0.99 if the trend holds: "
                  f"{_needed(curve, 'precision', 0.99)}; for recall 0.95: "
                  f"{_needed(curve, 'recall', 0.95)}."]
    return "\n".join(lines) + "\n"
