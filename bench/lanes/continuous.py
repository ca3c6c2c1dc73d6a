"""Part 6: the continuous conversation. The same messages (and answers) sent twice, memory
on: as one continuous conversation (`/v1/conductor/converse`, the server keeps the
history and assembles the layers) and as a chat session (the client sends its history).
Per message: prompt, cached and TTFT, side by side. The continuous prompt is bigger (the
policy, core and working memory, the time lines), but each message is served from the
cache up to the new one, as a chat session's is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench.lanes.conversation import Turn
from bench.lanes.lane import Lane
from bench.lanes.session import rotated

Progress = Callable[[str], None]
WAYS = ("continuous", "chat")
PLOT = "continuous_ttft.png"


async def run_continuous(lane: Lane, turns: Sequence[Turn], script: bool,
                         progress: Progress) -> list[dict[str, Any]]:
    """Each message in both ways, alternating which goes first."""
    chat = lane.conversation("continuous-compare")
    rows: list[dict[str, Any]] = []
    for k, turn in enumerate(turns):
        for way in rotated(WAYS, k):
            if way == "continuous":
                result = await lane.converse(turn, k + 1, script)
            else:
                result = await lane.ask(chat, turn, k + 1, script)
            rows.append({**result.as_dict(), "way": way, "message": k + 1})
            progress(f"continuous {k + 1}/{len(turns)} {way}: ttft {result.ttft_s:.2f} s, "
                     f"prompt {result.prompt_tokens}, cached {result.cached_tokens}")
    return rows


def _rows(rows: list[dict[str, Any]], way: str) -> list[dict[str, Any]]:
    return sorted((r for r in rows if r["way"] == way), key=lambda r: r["message"])


def continuous_ratios(rows: list[dict[str, Any]], block_size: int) -> dict[str, float | None]:
    """Later messages (2 on): TTFT continuous / chat (mean of the per-message ratios), and
    the least margin of a continuous message's cached tokens over the floor (the message
    before's prompt + output - one block)."""
    cont, chat = _rows(rows, "continuous"), _rows(rows, "chat")
    if len(cont) < 2 or len(chat) != len(cont):
        return {"continuous_ttft_over_chat": None, "continuous_cached_minus_floor_min": None}
    pairs = [a["ttft_s"] / b["ttft_s"] for a, b in zip(cont[1:], chat[1:], strict=True)
             if b["ttft_s"] > 0]
    margins = [now["cached_tokens"] - (before["prompt_tokens"] + before["completion_tokens"]
                                       - block_size)
               for before, now in zip(cont, cont[1:], strict=False)]
    return {"continuous_ttft_over_chat": sum(pairs) / len(pairs) if pairs else None,
            "continuous_cached_minus_floor_min": min(margins)}


def markdown_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["", "Continuous conversation against a chat session, same messages (part 6):", "",
             "| message | way | prompt tok | cached tok | prefilled tok | TTFT s |",
             "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in sorted(rows, key=lambda r: (r["message"], r["way"])):
        lines.append(f"| {r['message']} | {r['way']} | {r['prompt_tokens']} | "
                     f"{r['cached_tokens']} | {r['prefilled_tokens']} | {r['ttft_s']:.3f} |")
    return lines


def plot_continuous(rows: list[dict[str, Any]], profile: str, path) -> None:
    """Lines: each message's first-token time, continuous beside chat."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    for way in WAYS:
        mine = _rows(rows, way)
        ax.plot([r["message"] for r in mine], [r["ttft_s"] for r in mine], marker="o",
                label=way)
    ax.set_xlabel("message")
    ax.set_ylabel("TTFT (s)")
    ax.set_title(f"Continuous conversation against a chat session ({profile})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
