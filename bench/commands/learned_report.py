"""`bench.commands.learned`'s report: summary.md and the precision/recall-against-threshold
plot of the leave-one-set-out folds (a plain SVG: matplotlib is not in the venv)."""

from __future__ import annotations

import math
import re
from pathlib import Path

FOLD_COLOURS = {"dev": "#1b9e77", "test": "#d95f02", "holdout": "#7570b3"}
W, H, PAD = 300, 220, 40


def load_average() -> float:
    """The one-minute load average (the machine is shared: a timing needs it beside it)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def _panel(x0: int, title: str, series: dict[str, list[tuple[float, float, float]]],
           goals: dict[str, float]) -> list[str]:
    def px(t: float) -> float:
        return x0 + PAD + (t - 0.1) / 0.9 * (W - PAD - 10)

    def py(v: float) -> float:
        return 30 + (1 - v) / 0.6 * (H - 60) if v >= 0.4 else 30 + H - 60 + 4

    out = [f'<text x="{x0 + W / 2}" y="18" text-anchor="middle" font-size="12">{title}</text>',
           f'<rect x="{x0 + PAD}" y="30" width="{W - PAD - 10}" height="{H - 60}" '
           'fill="none" stroke="#999"/>']
    for v in (0.4, 0.6, 0.8, 1.0):
        out.append(f'<text x="{x0 + PAD - 4}" y="{py(v) + 4:.1f}" text-anchor="end" '
                   f'font-size="9">{v:.1f}</text>')
    for t in (0.1, 0.5, 0.9):
        out.append(f'<text x="{px(t):.1f}" y="{H - 16}" text-anchor="middle" '
                   f'font-size="9">{t:.1f}</text>')
    for name, goal in goals.items():
        dash = "2,2" if name == "precision" else "6,3"
        out.append(f'<line x1="{px(0.1):.1f}" x2="{px(1.0):.1f}" y1="{py(goal):.1f}" '
                   f'y2="{py(goal):.1f}" stroke="#000" stroke-dasharray="{dash}" '
                   'stroke-width="0.6"/>')
    for fold, points in series.items():
        for index, dash in ((1, ""), (2, ' stroke-dasharray="5,3"')):
            line = " ".join(f"{px(p[0]):.1f},{py(max(0.4, p[index])):.1f}" for p in points)
            out.append(f'<polyline points="{line}" fill="none" stroke="{FOLD_COLOURS[fold]}"'
                       f' stroke-width="1.4"{dash}/>')
    return out


def plot(grid: dict, chosen_key: str) -> str:
    """One panel a method, the chosen model's (or, with the rules chosen, the first
    model's): each fold's precision (solid) and recall (dashed) against the threshold."""
    entries = [e for k, e in grid.items() if k != "rules"]
    model = grid[chosen_key]["model"] if chosen_key != "rules" else entries[0]["model"]
    methods = list(dict.fromkeys(e["method"] for e in entries))
    body: list[str] = []
    for i, method in enumerate(methods):
        series: dict[str, list[tuple[float, float, float]]] = {}
        for e in entries:
            if e["method"] == method and e["model"] == model:
                for fold, s in e["per_fold"].items():
                    series.setdefault(fold, []).append(
                        (e["threshold"], s["precision"], s["recall"]))
        body += _panel(i * W, method, series, {"precision": 0.99, "recall": 0.95})
    legend = [f'<text x="{10 + 110 * j}" y="{H + 10}" font-size="10" fill="{colour}">'
              f'{fold} held out</text>' for j, (fold, colour) in enumerate(FOLD_COLOURS.items())]
    legend.append(f'<text x="{340}" y="{H + 10}" font-size="10">solid: precision, dashed: '
                  f'recall (writes); black: goals 0.99, 0.95; model {model}</text>')
    width = W * len(methods)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{H + 20}" '
            f'font-family="sans-serif">\n<rect width="{width}" height="{H + 20}" '
            'fill="white"/>\n' + "\n".join(body + legend) + "\n</svg>\n")


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
    lines += ["", "(Every threshold is in results.json; pr-threshold.svg plots the chosen "
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
