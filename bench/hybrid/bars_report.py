"""bench.hybrid.bars's report: the lanes' bar side by side, the fraction against prompt
length, the rule's lengths for the GPU profiles' blocks, a plot."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

PLOT = "fraction_by_length.png"
GOAL = 0.95
# The blocks vLLM sets on the GPU profiles (tandem profiles check): Qwen3.5-4B and -9B, 27B.
DENSE_BLOCK = 16  # the dense profiles' block: vLLM keeps every whole block, answer included
GPU_BLOCKS = {"qwen35-4b, qwen35-9b": 528, "qwen35-27b": 784}
BUCKETS = ((0, 2000), (2000, 4000), (4000, 8000), (8000, 12000), (12000, 10**9))
LABELS = {"off": "memory off", "on": "memory on", "lever": "memory on + answer prefill"}


def later(series: list[dict]) -> list[dict]:
    """Turns 2 and on (the first reads no earlier turn)."""
    return [row for row in series if row["turn"] >= 2]


def fraction(row: dict) -> float:
    return row["cached"] / row["prompt"]


def reaches(series: list[dict]) -> int | None:
    """The shortest prompt from which every later turn's cached fraction is >= GOAL."""
    rows = later(series)
    for n, row in enumerate(rows):
        if all(fraction(r) >= GOAL for r in rows[n:]):
            return row["prompt"]
    return None


def added(series: list[dict], lever: bool) -> float:
    """Tokens a turn adds past where the state is kept, on top of the block's remainder:
    the new message and its frame, and without the lever the answer before it."""
    rows = [r for r in later(series) if "new" in r]
    by_turn = {r["turn"]: r for r in series}
    return mean(r["new"] + (0 if lever else by_turn[r["turn"] - 1]["answer"]) for r in rows)


def rule_lengths(block: int, tokens: float) -> tuple[int, int]:
    """The prompt length from which the fraction is >= GOAL on average (the block's
    remainder half a block) and on every turn (a whole block): the miss over 1 - GOAL."""
    scale = 1 / (1 - GOAL)
    return round(scale * (block / 2 + tokens)), round(scale * (block + tokens))


def lanes_rows(bar: dict[str, Any]) -> dict[str, Any]:
    means = bar["means"]
    return {"off": means["off"]["cached_fraction"], "on": means["on"]["cached_fraction"],
            "lever": means["lever"]["cached_fraction"], "prompt": means["on"]["prompt_tokens"],
            "on_over_off": bar["on_over_off"], "lever_over_off": bar["lever_over_off"]}


def markdown(results: dict[str, Any]) -> str:
    block = results["block_size"]
    on, off = (lanes_rows(results["lanes_bar"][k]) for k in ("with_layout", "without_layout"))

    def f(v: float | None) -> str:
        return "- (off reads 0)" if v is None else f"{v:.3f}"

    def met(v: float | None) -> str:
        return "vacuously: on >= 0.95 x 0" if v is None else (
            "yes" if v >= GOAL else "no")

    sweep = results["length_sweep"]["turns"]
    lines = [
        "# The dense models' bar on tiny-hybrid (issue 56, item 4)",
        "",
        f"Measured by `python -m bench.hybrid.bars` on the CPU: vLLM's block {block} tokens, "
        f"the engine's context {results['context']}; {results['wall_s']} s, load average "
        f"{results['load_average_start'][0]:.2f} at the start and "
        f"{results['load_average_end'][0]:.2f} at the end. The tiny model's weights are "
        "random: the answers are scripted and the figures are the cache's.",
        "",
        "## The lanes' bar: later-turn cached fraction, memory on / off",
        "",
        "The lanes bench's conversation (8 turns, its 50 notes in `on`), its `Lane`s, "
        "interleaved turn by turn; the bar (bench/README.md, Targets) is the ratio of the "
        "two lanes' later-turn means, at least 0.95.",
        "",
        "| later turns (2-8) | with the layout | without (plain vLLM's) |",
        "| --- | --- | --- |",
        f"| mean prompt tokens, memory on | {on['prompt']:.0f} | {off['prompt']:.0f} |",
        f"| cached fraction, memory off | {f(on['off'])} | {f(off['off'])} |",
        f"| cached fraction, memory on | {f(on['on'])} | {f(off['on'])} |",
        f"| cached fraction, memory on + answer prefill | {f(on['lever'])} | "
        f"{f(off['lever'])} |",
        f"| **on / off** (bar >= {GOAL}) | **{f(on['on_over_off'])}** "
        f"({met(on['on_over_off'])}) | {f(off['on_over_off'])} ({met(off['on_over_off'])}) |",
        f"| on + answer prefill / off | {f(on['lever_over_off'])} | "
        f"{f(off['lever_over_off'])} |",
        "",
        *_prefill_note(results),
        *_off_note(results, block),
        "## The cached fraction against prompt length",
        "",
        "The same turns again and again (answers of about 250 tokens), one conversation a "
        "lane, with the layout; mean cached fraction of the later turns whose prompt is in "
        "the range:",
        "",
        "| prompt tokens | " + " | ".join(LABELS[k] for k in sweep) + " |",
        "| --- | " + " | ".join("---" for _ in sweep) + " |",
    ]
    for low, high in BUCKETS:
        cells = []
        for series in sweep.values():
            rows = [r for r in later(series) if low <= r["prompt"] < high]
            cells.append(f"{mean(map(fraction, rows)):.3f} ({len(rows)})" if rows else "-")
        span = f"{low:,}+" if high > 10**8 else f"{low:,} - {high:,}"
        lines.append(f"| {span} | " + " | ".join(cells) + " |")
    reach = {k: reaches(v) for k, v in sweep.items()}
    lines += [
        "| every later turn >= 0.95 from | " + " | ".join(
            f"{v:,} tokens" if v else "not reached" for v in reach.values()) + " |",
        "",
        "A later turn misses what lies past the last block boundary where vLLM kept a "
        "recurrent state (one a request: before its prompt's last token), so the miss is the "
        "block's remainder (0 to a block) plus what the turn adds after that point: the new "
        "message and its frame, and without the answer prefill the answer before it too. "
        f"The fraction is at least {GOAL} once the prompt is {1 / (1 - GOAL):.0f} times that "
        "miss. By this rule, with the tokens a turn added here (measured):",
        "",
        "| block | added a turn | >= 0.95 on average from | on every turn from |",
        "| --- | --- | --- | --- |",
    ]
    blocks = {f"{block} (tiny-hybrid, measured above)": block, **{
        f"{b} ({name})": b for name, b in GPU_BLOCKS.items()}}
    for lane, lever in (("on", False), ("lever", True)):
        tokens = added(sweep[lane], lever)
        for name, b in blocks.items():
            avg, every = rule_lengths(b, tokens)
            lines.append(f"| {name}, {LABELS[lane]} | {tokens:.0f} | {avg:,} | {every:,} |")
    dense = added(sweep["lever"], lever=True)  # a dense engine keeps the answer's blocks
    avg, every = rule_lengths(DENSE_BLOCK, dense)
    lines += [
        f"| {DENSE_BLOCK} (a dense profile's, for comparison) | {dense:.0f} | {avg:,} | "
        f"{every:,} |",
        "",
        f"![cached fraction against prompt length]({PLOT})",
        "",
    ]
    return "\n".join(lines)


def _prefill_note(results: dict[str, Any]) -> list[str]:
    """What the answer prefill is: the server's job, and how its runs ended."""
    runs = [r for k in ("with_layout", "without_layout")
            for r in results["lanes_bar"][k]["lever_prefills"]]
    done = sum(1 for r in runs if r.get("outcome", "done") == "done")
    return ["The answer prefill is the server's record prefill (server/idle/"
            "record_prefill.py: after an answer on a hybrid engine, the session's record as "
            "the next turn replays it and one token more, a background request), its tick "
            f"run in the idle moment after each answer: {len(runs)} runs, {done} done.", ""]


def _off_note(results: dict[str, Any], block: int) -> list[str]:
    """Why the ratio says nothing when memory off read nothing: its prompts' lengths."""
    bar = results["lanes_bar"]["with_layout"]
    if bar["on_over_off"] is not None:
        return []
    prompts = [t["prompt_tokens"] for t in bar["turns"] if t["mode"] == "off"]
    return [f"Memory off's prompts ({min(prompts):,} to {max(prompts):,} tokens) never pass "
            f"a {block}-token block, so it reads nothing from the cache and the ratio holds "
            "whatever memory on reads: on these models the figure to set against the dense "
            "ones is the fraction itself, below against prompt length.", ""]


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    block = results["block_size"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for lane, series in results["length_sweep"]["turns"].items():
        rows = later(series)
        ax.plot([r["prompt"] for r in rows], [fraction(r) for r in rows], marker=".",
                label=LABELS[lane])
    xs = range(1000, max(r["prompt"] for s in results["length_sweep"]["turns"].values()
                         for r in s) + 1, 250)
    tokens = added(results["length_sweep"]["turns"]["on"], lever=False)
    ax.plot(list(xs), [1 - (block / 2 + tokens) / x for x in xs], linestyle="--",
            color="grey", label=f"rule, mean (block {block}, {tokens:.0f} added)")
    ax.axhline(GOAL, color="black", linewidth=0.8)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("cached tokens / prompt tokens")
    ax.set_title(f"Later turns' cached fraction on tiny-hybrid (block {block})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(results: dict[str, Any], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    plot(results, out / PLOT)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (out / "summary.md").write_text(text)
    return text
