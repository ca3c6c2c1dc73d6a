"""`python -m bench.secrets.fuzz`: the secret check's worst time per KB.

The check (`conductor/notes/secrets.py`) runs on every note a user or the model writes. Python's
regex engine backtracks, so a pattern with an unbounded run before a keyword can cost
time quadratic in the text (a 6,000-character body of `-` took 4.5 s). This bench runs the
check on adversarial texts, each seed repeated to 8 KB and to 64 KB (linear time keeps
the time per KB flat), and on random texts drawn from the characters the patterns care
about, and reports the worst time per KB and the 64 KB / 8 KB ratio (8 is linear, 64
quadratic). Writes results.json and summary.md under bench/results/secrets/.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from bench.paths import RESULTS_DIR
from conductor.notes.secrets import find_secrets, redact

SEEDS = ("-", "a", "aB1", " ", "\t", "é", "x.y-", "password", "password is ", "secret=",
         "-----BEGIN PRIVATE KEY-----\n", "sk-", "token ", "a://", "a://b:", "login a/",
         " -u a:", "AKIA", "eyJ", "Bearer ", "DB_PASSWORD=", "_", "aaaaaaaaaa_secret_")
ALPHABET = "aA1-_.:=/@ \n\t'\"$<{*é" + "passwordsecrettokenbearerkey"
OUT = RESULTS_DIR / "secrets"


def best_time(text: str, repeats: int = 3, clock: Callable[[], float] = time.perf_counter) -> float:
    """The best of `repeats` timings of the secret check on `text`, read on `clock` (a
    test passes `time.thread_time`: CPU time, which a loaded machine does not stretch)."""
    best = float("inf")
    for _ in range(repeats):
        started = clock()
        find_secrets(text)
        best = min(best, clock() - started)
    return best


def repeated(seed: str, kb: int) -> str:
    return (seed * (kb * 1024 // len(seed) + 1))[: kb * 1024]


def measure_seed(seed: str) -> dict:
    small, large = best_time(repeated(seed, 8)), best_time(repeated(seed, 64))
    return {"seed": seed, "ms_per_kb_8": small / 8 * 1000, "ms_per_kb_64": large / 64 * 1000,
            "ratio_64_over_8": large / small if small else None}


def random_texts(count: int, kb: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(kb * 1024)) for _ in range(count)]


def run(random_count: int = 20) -> dict:
    started = time.time()
    seeds = [measure_seed(s) for s in SEEDS]
    fuzz = []
    for text in random_texts(random_count, 16):
        elapsed = best_time(text, 1)
        once = redact(text).text
        fuzz.append({"ms_per_kb": elapsed / 16 * 1000,
                     "redacted_again_finds": len(find_secrets(once)) - once.count("[redacted:")})
    worst = max(seeds, key=lambda r: r["ms_per_kb_64"])
    return {"bench": {"started_at": datetime.fromtimestamp(started).isoformat(timespec="seconds"),
                      "wall_s": time.time() - started, "seeds": len(SEEDS),
                      "random_texts": random_count},
            "seeds": seeds, "random": fuzz,
            "summary": {"worst_ms_per_kb": worst["ms_per_kb_64"], "worst_seed": worst["seed"],
                        "worst_ratio_64_over_8": max(r["ratio_64_over_8"] or 0 for r in seeds),
                        "random_worst_ms_per_kb": max(r["ms_per_kb"] for r in fuzz)}}


def markdown(results: dict) -> str:
    summary = results["summary"]
    lines = ["# The secret check's time per KB", "",
             f"{results['bench']['started_at']}: {results['bench']['seeds']} adversarial "
             f"seeds repeated to 8 and 64 KB (best of 3), {results['bench']['random_texts']} "
             "random 16 KB texts.", "",
             f"Worst: {summary['worst_ms_per_kb']:.2f} ms/KB ({summary['worst_seed']!r} at "
             f"64 KB); worst 64 KB / 8 KB time ratio {summary['worst_ratio_64_over_8']:.1f} "
             "(8 is linear); random texts at most "
             f"{summary['random_worst_ms_per_kb']:.2f} ms/KB.", "",
             "| seed | ms/KB at 8 KB | ms/KB at 64 KB | 64 KB / 8 KB |",
             "| --- | ---: | ---: | ---: |"]
    for row in sorted(results["seeds"], key=lambda r: -r["ms_per_kb_64"]):
        lines.append(f"| {row['seed']!r} | {row['ms_per_kb_8']:.2f} | {row['ms_per_kb_64']:.2f}"
                     f" | {row['ratio_64_over_8']:.1f} |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    """ms/KB at 8 and 64 KB for each seed: flat bars are linear time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(results["seeds"], key=lambda r: -r["ms_per_kb_64"])
    labels = [repr(r["seed"])[:16] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4), dpi=100)
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["ms_per_kb_8"] for r in rows], 0.4, label="8 KB")
    ax.bar([i + 0.2 for i in x], [r["ms_per_kb_64"] for r in rows], 0.4, label="64 KB")
    ax.set_xticks(list(x), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("ms per KB")
    ax.set_title("Secret check: time per KB (the same at 8 and 64 KB: linear)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    results = run()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    text = markdown(results)
    (OUT / "summary.md").write_text(text)
    plot(results, OUT / "secret_time.png")
    print(text)


if __name__ == "__main__":
    main()
