"""Issue 58's figures, the costs that grow with agents, for the lanes' summary: the
later-turn prefill memory adds over off (item 1) and what the prefetching lanes prefilled
in idle time to bring it down, measured in this run; and the two figures other benches
measure (item 2, `tandem bench --index`; item 4, `tandem bench --overhead`), read from
their committed results and labelled with the bench and the run they came from, so the
one summary lists all four items (item 3 is the new-session row, `new_sessions.py`)."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench.index.load import EMPTY, MEMORY_TOKENS
from bench.index.pool import pooled
from bench.index.variants import DEFAULT as OLD_DEFAULT
from bench.lanes.lane import PREFETCHING

EXTRA_PREFILL_MODES = ("prefetch", "on", "hinted")
EXTRA_PREFILL_GOAL = 16  # tokens a later turn, prefetch without hints over off (item 1)
INDEX_WALL_GOAL = 1.10  # a lived-in store's wall over plain vLLM, 32 clients (item 2)


def extra_prefill(modes: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Per mode, its later turns' mean prefilled tokens minus off's: what memory makes the
    user wait for on top of what the conversation itself prefills."""
    off = modes["off"]["prefilled_tokens"]
    return {f"extra_prefill_{mode}_over_off":
            None if off is None or modes[mode]["prefilled_tokens"] is None
            else modes[mode]["prefilled_tokens"] - off for mode in EXTRA_PREFILL_MODES}


def background_prefill(part: dict[str, Any], modes: dict[str, dict[str, Any]]
                       ) -> dict[str, float | None]:
    """Per prefetching lane, the tokens its idle-time prefetch runs prefilled, per later
    turn: the work moved off the user's clock, not removed.

    Counted from the lane's tally (`PrefetchTally.runs`): each run that finished, by its
    hidden message's tokens (the idle step sends one request a run and reads the record
    before it from the cache). A run preempted by a client prefilled part of its message,
    an unknown part, and is left out. The runs after the last turn are counted too (they
    serve no measured turn), so the figure errs high. Hook: a run dict that carries its
    own `prefilled` count (a prefetch by branches, whose requests read each other's
    prefixes) is counted by it instead of `tokens`.
    """
    out: dict[str, float | None] = {}
    for mode in PREFETCHING:
        tally, turns = part.get(mode), modes[mode]["turns"]
        runs = (tally or {}).get("runs") or []
        tokens = sum(r.get("prefilled", r["tokens"]) for r in runs if r["outcome"] == "done")
        out[f"background_prefill_{mode}_per_turn"] = tokens / turns if tally and turns else None
    return out


def index_figure(folder: Path) -> dict[str, Any] | None:
    """Item 2 from the index bench's committed runs (`folder/run-*/results.json`, pooled as
    `bench.index.pool` pools them): the lowest wall over plain vLLM under 32 clients of a
    variant whose user holds notes and whose strict accuracy (mean over the runs) is no
    lower than the old default's (the 1,500-token header index)."""
    paths = sorted(folder.glob("run-*/results.json"))
    if not paths:
        return None
    runs = [json.loads(p.read_text()) for p in paths]
    table = pooled(runs)
    floor = statistics.fmean(table[OLD_DEFAULT]["accuracy"]) if table.get(
        OLD_DEFAULT, {}).get("accuracy") else None
    able = [(entry["wall_ratio_median"], name, entry) for name, entry in table.items()
            if name != EMPTY and entry["wall_ratio_median"] is not None and entry["accuracy"]
            and floor is not None and statistics.fmean(entry["accuracy"]) >= floor]
    if not able:
        return None
    wall, name, entry = min(able, key=lambda a: a[0])
    dates = sorted(r["bench"]["started_at"][:10] for r in runs)
    return {"value": wall, "variant": name, "accuracy": statistics.fmean(entry["accuracy"]),
            "accuracy_floor": floor, "ttft_p95_ratio": entry["ttft_p95_ratio_median"],
            "rounds": len(entry["walls"]),
            "empty_store": (table.get(EMPTY) or {}).get("wall_ratio_median"),
            # vLLM sent memory's fixed tokens, and the variant over it (runs that have it)
            "memory_tokens": (table.get(MEMORY_TOKENS) or {}).get("wall_ratio_median"),
            "over_memory_tokens": entry.get("wall_over_memory_tokens"),
            "source": f"`tandem bench --index`, {', '.join(p.parent.name for p in paths)} "
                      f"({_dates(dates)})"}


def overhead_figure(path: Path) -> dict[str, Any] | None:
    """Item 4 from the overhead bench's committed `results.json`: the server's share of
    TTFT under load, p95 with memory on, and its event-loop stalls, with the bench's own
    verdicts. A run before the bench wrote its date is dated by its commit."""
    if not path.is_file():
        return None
    r = json.loads(path.read_text())
    on, idle = r["stalls"]["on"], r["stalls"]["idle"]
    date = (r.get("started_at") or "")[:10] or _committed(path)
    return {"value": r["server_share"]["on"]["p95_ms"], "goal_ms": r["goal_p95_ms"],
            "met": r["p95_met"], "p50_ms": r["server_share"]["on"]["p50_ms"],
            "stall_share": on["stall_share"], "idle_stall_share": idle["stall_share"],
            "stalls_met": r["stalls_met"],
            "source": f"`tandem bench --overhead`, {path.parent.name} ({date})"}


def _memory_tokens_split(index: dict[str, Any]) -> str:
    """"; vLLM sent memory's tokens X, the variant over it Y" where the runs measured it."""
    tokens, over = index.get("memory_tokens"), index.get("over_memory_tokens")
    if tokens is None or over is None:
        return ""
    return f"; vLLM sent memory's tokens {tokens:.2f}, the variant over it {over:.2f}"


def _dates(dates: list[str]) -> str:
    return dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"


def _committed(path: Path) -> str:
    """The day `path` was last committed, or "not committed"."""
    try:
        day = subprocess.run(["git", "log", "-1", "--format=%cs", "--", path.name],
                             cwd=path.parent, capture_output=True, text=True, timeout=10,
                             check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        day = ""
    return f"committed {day}" if day else "not committed"


def other_benches(results_dir: Path, profile: str) -> dict[str, dict[str, Any] | None]:
    """Items 2 and 4 as their benches last measured them (None: no committed run)."""
    return {"index": index_figure(results_dir / "index"),
            "overhead": overhead_figure(results_dir / "overhead" / profile / "results.json")}


def other_ratios(other: dict[str, dict[str, Any] | None]) -> dict[str, float | None]:
    """The other benches' figures under the keys of their target rows."""
    index, overhead = other.get("index") or {}, other.get("overhead") or {}
    return {"index_lived_in_wall_over_vllm": index.get("value"),
            "overhead_server_share_p95_ms": overhead.get("value"),
            "overhead_loop_stall_share": overhead.get("stall_share")}


def other_targets(other: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Target rows for items 2 and 4, each naming the bench and run it came from."""
    index, overhead = other.get("index"), other.get("overhead")

    def row(name: str, key: str, figure: dict[str, Any] | None, value: Any, goal: str,
            met: bool | None) -> dict[str, Any]:
        return {"name": name, "key": key, "measured": value, "target": goal,
                "met": None if value is None else met, "per_turn": None,
                "source": figure["source"] if figure else "no committed run"}

    lived_in = (f"lived-in store, 32 clients: wall / vLLM, best variant with accuracy no "
                f"lower than `{OLD_DEFAULT}`'s" + (
                    f" (`{index['variant']}`, accuracy {index['accuracy']:.2f} against "
                    f"{index['accuracy_floor']:.2f}, {index['rounds']} rounds; no notes "
                    f"{index['empty_store']:.2f}{_memory_tokens_split(index)})" if index
                    else "") + " (issue 58, item 2)")
    stalls = ("event-loop stalls past 1 ms, memory on, share of beats" + (
        f" (idle loop {overhead['idle_stall_share']:.3f})" if overhead else "")
        + " (issue 58, item 4)")
    return [
        row(lived_in, "index_lived_in_wall_over_vllm", index, index and index["value"],
            f"<= {INDEX_WALL_GOAL:.2f}", bool(index) and index["value"] <= INDEX_WALL_GOAL),
        row("server's share of TTFT under load, p95 ms, memory on, 1,000 users x 100 "
            "records (issue 58, item 4)", "overhead_server_share_p95_ms", overhead,
            overhead and overhead["value"],
            f"< {overhead['goal_ms']:g} ms" if overhead else "< 5 ms",
            bool(overhead) and overhead["met"]),
        row(stalls, "overhead_loop_stall_share", overhead,
            overhead and overhead["stall_share"], "<= the idle loop's (x1.5)",
            bool(overhead) and overhead["stalls_met"]),
    ]
