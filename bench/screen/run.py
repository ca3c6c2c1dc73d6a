"""The Memory screen on a large store: `tandem bench --screen [--quick]`.

A store of 10,000 notes (2,000 with `--quick`) in user, project and session scopes is
written as files (the files are the truth: the store scans them as it would a store
grown by hand), then the screen's own requests are timed through the app's HTTP routes
(in-process, no network, no engine): the first page of the list, a page deep in it, a
project's page, the tree, a note with its history, and search as you type (each prefix
of a query, as the debounced box sends them). The first list after the files were
written (the store's first scan and index build) is reported apart; the target is the
issue's: a page of the list in under 300 ms.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.paths import RESULTS_DIR
from bench.report import fmt, write_run
from conductor.notes import NoteStore
from conductor.notes.note_format import Note, render
from conductor.storage.atomic import atomic_write

RESULTS = RESULTS_DIR / "screen"
USER = "bench"
TARGET_MS = 300.0
REPEATS = 15
QUERY = "deploy the release branch"
WORDS = ("deploy release branch kettle garden gate invoice budget review python "
         "rust docker cache ledger prompt tokens memory screen search router proxy "
         "tea lunch meeting monday friday backup restore secret rotate schema").split()
KINDS = ("reference", "runbook", "gotcha", "rule")


def say(message: str) -> None:
    print(f"[screen bench] {message}", flush=True)


def write_store(root: Path, count: int, seed: int = 7) -> dict[str, Any]:
    """`count` notes as files: 70% user, 20% in five projects, 10% in twenty sessions."""
    rng = random.Random(seed)
    store = NoteStore(root, USER)  # makes the tree
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(count):
        where = rng.random()
        scope, project, session = "user", None, None
        if where > 0.9:
            scope, session = "session", f"s{i % 20:02d}"
        elif where > 0.7:
            scope, project = "project", f"proj{i % 5}-{i % 5:08x}"
        words = rng.sample(WORDS, 6)
        note = Note(id=f"{i:010x}", title=f"{' '.join(words[:3])} {i}",
                    kind=KINDS[i % len(KINDS)], scope=scope, project=project, session=session,
                    body=" ".join(rng.choice(WORDS) for _ in range(40)),
                    created=start + timedelta(minutes=i), updated=start + timedelta(minutes=i),
                    source="cli")
        atomic_write(store.layout.scope_dir(scope, note.scope_key) / note.file_name(),
                     render(note), durable=False)
        if i and i % 2000 == 0:
            say(f"{i} of {count} notes written")
    return {"notes": count, "projects": 5, "sessions": 20}


async def _time(client: httpx.AsyncClient, path: str, params: dict | None = None) -> float:
    started = time.perf_counter()
    response = await client.get(path, params=params)
    took = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return took


async def measure(app, repeats: int) -> dict[str, Any]:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                 timeout=600) as client:
        notes = "/v1/conductor/memory/notes"
        first = await _time(client, notes, {"limit": 50})
        say(f"first list (scan and index build): {first:.0f} ms")
        cases = {
            "list, first page": (notes, {"limit": 50}),
            "list, page 100": (notes, {"limit": 50, "offset": 4950}),
            "list, one project": (notes, {"limit": 50, "scope": "project",
                                          "project": "proj3-00000003"}),
            "list, archived (none)": (notes, {"limit": 50, "state": "archived"}),
            "tree": ("/v1/conductor/memory/tree", None),
            "a note with its history": (f"{notes}/{0:010x}", None),
        }
        prefixes = [QUERY[:n] for n in range(3, len(QUERY) + 1, 3)]
        timings: dict[str, list[float]] = {name: [] for name in cases}
        timings["search as you type (each prefix)"] = []
        for round_ in range(repeats):
            for name, (path, params) in cases.items():
                timings[name].append(await _time(client, path, params))
            for prefix in prefixes:
                timings["search as you type (each prefix)"].append(
                    await _time(client, notes, {"limit": 50, "q": prefix}))
            say(f"round {round_ + 1} of {repeats}")
    rows = {name: {"median_ms": statistics.median(v), "p95_ms": _p95(v), "n": len(v)}
            for name, v in timings.items()}
    return {"first_list_ms": first, "requests": rows}


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def run_screen_bench(out: Path | None, quick: bool) -> dict[str, Any]:
    from engine.profiles import load_profile
    from server.app import create_app

    count = 2_000 if quick else 10_000
    with tempfile.TemporaryDirectory(prefix="tandem-screen-bench-") as home:
        say(f"writing {count} notes")
        store = write_store(Path(home) / "memory", count)
        from conductor.memory.services import MemorySettings

        # The app's routes without its lifespan: no engine is loaded, none is needed.
        app = create_app(load_profile("tiny"), Path(home),
                         memory_settings=MemorySettings(user_name=USER))
        measured = asyncio.run(measure(app, 5 if quick else REPEATS))
    results = {"bench": "screen", "quick": quick, "store": store, "target_ms": TARGET_MS,
               **measured, "within_target": all(r["p95_ms"] < TARGET_MS
                                                for r in measured["requests"].values())}
    folder = out or RESULTS / ("quick" if quick else "full")
    say(write_run(folder, results, _summary(results), lambda f: _plot(results, f)))
    return results


def _summary(results: dict[str, Any]) -> str:
    lines = [f"# The Memory screen on {results['store']['notes']:,} notes", "",
             "Each request through the app's HTTP routes in-process (no network), "
             f"timed over its repeats; target: under {TARGET_MS:.0f} ms.", "",
             "| request | median ms | p95 ms | n |", "| --- | ---: | ---: | ---: |"]
    for name, row in results["requests"].items():
        lines.append(f"| {name} | {fmt(row['median_ms'], 1)} | {fmt(row['p95_ms'], 1)} | "
                     f"{row['n']} |")
    lines += ["", f"The first list after the files were written (the store's scan and its "
              f"index build): {fmt(results['first_list_ms'], 0)} ms.",
              f"Every request's p95 under the target: {results['within_target']}.", ""]
    return "\n".join(lines)


def _plot(results: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["requests"])
    medians = [results["requests"][n]["median_ms"] for n in names]
    p95 = [results["requests"][n]["p95_ms"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ys = range(len(names))
    ax.barh([y + 0.2 for y in ys], medians, height=0.4, label="median")
    ax.barh([y - 0.2 for y in ys], p95, height=0.4, label="p95")
    ax.axvline(TARGET_MS, color="red", linestyle="--", label=f"target {TARGET_MS:.0f} ms")
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(f"Memory screen requests on {results['store']['notes']:,} notes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "screen_latency.png", dpi=110)
    plt.close(fig)
