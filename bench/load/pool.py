"""Paired ratios pooled over several load-bench runs of the same code:
`python -m bench.load.pool RUN_DIR [RUN_DIR ...]` prints, per comparison and client count,
the median over every paired round of every run (a round's wall varies by 10-30% on a
2-core machine, so one run's 5-8 rounds do not settle a 5% margin)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.load.run import (
    COMPARISONS,
    met_text,
    paired_ratios,
    ratio_medians,
    ratio_text,
    target_text,
    within,
)

# Not a target: what memory on's hidden tokens cost plain vLLM's engine itself.
TOKENS_COST = ("vllm_memory_tokens", "vllm", None)


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lane, yardstick, limit in (*COMPARISONS, TOKENS_COST):
        counts = sorted({c for run in runs for c in run["servers"].get(lane, {})}, key=int)
        for clients in counts:
            walls: list[float] = []
            ttfts: list[float] = []
            for run in runs:
                ours = run["servers"].get(lane, {}).get(clients)
                theirs = run["servers"].get(yardstick, {}).get(clients)
                if ours is not None and theirs is not None:
                    run_walls, run_ttfts = paired_ratios(ours["rounds"], theirs["rounds"])
                    walls += run_walls
                    ttfts += run_ttfts
            if not walls:
                continue
            paired = ratio_medians(walls, ttfts)
            out[f"{lane}@{clients} / {yardstick}"] = {
                "rounds": len(walls), **paired, "target": limit,
                "met": within(paired, limit)}
    return out


def markdown(table: dict[str, Any], sources: list[str]) -> str:
    lines = [f"# Load bench, paired rounds pooled over {len(sources)} runs", "",
             *(f"- `{s}`" for s in sources), "",
             "| comparison | paired rounds | wall (median) | p95 TTFT (median) | target | met |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, r in table.items():
        lines.append(f"| {name} | {r['rounds']} | {ratio_text(r['wall_ratio_median'])} | "
                     f"{ratio_text(r['ttft_p95_ratio_median'])} | {target_text(r['target'])} | "
                     f"{met_text(r['met'])} |")
    return "\n".join(lines) + "\n"


USAGE = "usage: python -m bench.load.pool RUN_DIR [RUN_DIR ...] (each holds a results.json)"


def main(argv: list[str]) -> int:
    if not argv or any(a.startswith("-") for a in argv):
        print(USAGE, file=sys.stderr)
        return 2
    runs = []
    for d in argv:
        try:
            runs.append(json.loads((Path(d) / "results.json").read_text()))
        except (OSError, ValueError) as exc:
            print(f"{d}: no load bench results.json readable there ({exc.__class__.__name__})",
                  file=sys.stderr)
            return 2
    print(markdown(pooled(runs), argv), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
