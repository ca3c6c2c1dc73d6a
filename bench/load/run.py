"""Throughput under many clients: `tandem bench --load [--clients 32,128] [--against-vllm]`.

The same load (`bench.load.clients`) against Tandem with memory off, Tandem with memory on
and, with `--against-vllm`, plain vLLM's own server given the profile's engine settings;
each its own process on this machine. With `--against-vllm` a fourth lane,
`vllm_memory_tokens`, sends plain vLLM each request with the tokens memory on hides in a
prompt (the engine's tool catalog and the memory card, about 400 tokens on the tiny
model): what those tokens cost the engine itself, apart from what Tandem's server adds.
One more lane, `memory_on_notes`, is memory on for a user who already has notes (the
quality bench's 40 facts): its shared context holds their index and the notes a prompt
matches follow the question. It has no target; it shows what a lived-in store costs.

All the servers are up at once and the rounds take turns (vLLM, memory off, memory on,
then the next round starting one lane later), so a slow minute of this machine falls on
every lane alike; only one server has clients at a time, the others idle (each round
starts `SETTLE_S` after the last, once the previous server has gone quiet). Per server and
client count: a warm-up round, then `rounds` measured ones; the best (least wall time) of
each, and the median of the paired ratios (round r of a lane over round r of its
yardstick, run one after the other). Tandem's figures are ratios to vLLM's from the same
run. Writes `results.json`, `summary.md` and `load.png` under
`bench/results/load/<profile>/` (or `--out`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.load.clients import PLAIN, LoadPlan, RequestShape, run_round
from bench.load.cpu import cpu_seconds, server_tree
from bench.load.plain_vllm import engine_args_of, free_port, plain_vllm, server_process
from bench.paths import RESULTS_DIR
from bench.quality.facts import FACTS, Fact, load_facts
from bench.report import environment, write_run
from engine.engine import resolve_model_path
from engine.home import tandem_home
from engine.model_builder import models_dir
from engine.profiles import Profile

if TYPE_CHECKING:
    from collections.abc import Mapping

RESULTS = RESULTS_DIR / "load"
TARGETS = {"memory_off": 1.05, "memory_on": 1.10}  # Tandem / vLLM, wall and p95 TTFT
# (lane, its yardstick, the most it may take or None): memory on is also held to vLLM
# given the same hidden tokens, which leaves what Tandem's server adds to them.
COMPARISONS: tuple[tuple[str, str, float | None], ...] = (
    ("memory_off", "vllm", TARGETS["memory_off"]),
    ("memory_on", "vllm", TARGETS["memory_on"]),
    ("memory_on", "vllm_memory_tokens", TARGETS["memory_off"]),
    ("memory_on_notes", "vllm", None),
    ("memory_on_notes", "memory_on", None))
LOAD_USER = "load"  # whose memory the bench's requests are (the server's own user)


@dataclass(frozen=True)
class Lane:
    base: str  # the server's base URL
    shape: RequestShape = PLAIN


def memory_tokens_shape() -> RequestShape:
    """The hidden tokens of a memory-on prompt with an empty store, as plain request
    parts: the engine's tools (tool_choice none: vLLM renders them and parses no call)
    and the memory card as the system message."""
    from conductor.hidden.card import memory_card
    from server.turn.answering.engine_tools import DEFINITIONS

    return RequestShape(system=memory_card(), tools=DEFINITIONS, tool_choice="none")
READY_TIMEOUT_S = 600
# Between rounds: vLLM's worker busy-loops on its message queue for a second after its
# last step (shm_broadcast's busy_loop_s), so a round started at once shares the 2 cores
# with the lane before it (measured: 0.4-0.7 s of that worker's CPU in the next round).
SETTLE_S = 2.0
PLOT = "load.png"


def say(message: str) -> None:
    print(f"[load bench] {message}", flush=True)


def write_notes(home: Path, facts: Sequence[Fact]) -> None:
    """The facts as the bench user's notes, through the store, before the server starts."""
    from conductor.notes import NoteStore

    store = NoteStore(home / "memory", LOAD_USER)
    for fact in facts:
        result = store.add(title=fact.title, body=fact.body, kind=fact.kind, scope=fact.scope,
                           source="cli", has_user_message=True)
        if not result.ok:
            raise RuntimeError(f"the store refused a bench note: {result.reason}")


@contextmanager
def tandem_server(profile: Profile, memory: str, notes: Sequence[Fact] = (),
                  profile_path: Path | None = None) -> Iterator[str]:
    """`tandem serve` in its own process, on a fresh home sharing the built models, its
    user holding `notes`; `profile_path`: a profile file to serve instead of the named
    profile (the index bench's variants)."""
    with tempfile.TemporaryDirectory(prefix="tandem-load-") as tmp:
        home = Path(tmp)
        (home / "models").symlink_to(models_dir(tandem_home()), target_is_directory=True)
        write_notes(home, notes)
        port = free_port()
        command = [sys.executable, "-m", "server.cli", "serve",
                   "--profile", str(profile_path or profile.name),
                   "--port", str(port), "--memory", memory]
        env = {**os.environ, "TANDEM_HOME": str(home), "TANDEM_USER": LOAD_USER}
        with server_process(command, env, port, "/readyz", READY_TIMEOUT_S) as base:
            yield base


@contextmanager
def vllm_server(profile: Profile) -> Iterator[str]:
    model = resolve_model_path(profile, tandem_home(), say)
    args, env = engine_args_of(profile)
    with plain_vllm(Path(model), profile.name, engine_args=tuple(args), env=env) as v1:
        yield v1.removesuffix("/v1")


def measure_interleaved(bases: Mapping[str, Lane | str], model: str,
                        client_counts: list[int], rounds: int,
                        progress: Callable[[str], None] = say,
                        settle_s: float = SETTLE_S) -> dict[str, Any]:
    """Per lane and client count: a warm-up round, then `rounds` measured ones and the
    best; the rounds take turns with the other lanes' (the lane that goes first moves on
    by one each round)."""
    by_name = {name: lane if isinstance(lane, Lane) else Lane(lane)
               for name, lane in bases.items()}
    lanes = list(by_name)
    servers: dict[str, Any] = {lane: {} for lane in lanes}
    for clients in client_counts:
        plan = LoadPlan(clients=clients)
        for lane in lanes:  # warm-up
            asyncio.run(run_round(by_name[lane].base, model,
                                  LoadPlan(clients=min(clients, 8)), seed=0,
                                  shape=by_name[lane].shape))
        measured: dict[str, list[dict[str, Any]]] = {lane: [] for lane in lanes}
        trees = {lane: server_tree(by_name[lane].base) for lane in lanes}
        for r in range(rounds):
            for lane in lanes[r % len(lanes):] + lanes[:r % len(lanes)]:
                time.sleep(settle_s)  # the lane before goes quiet first
                tree = trees[lane]
                before = cpu_seconds(tree) if tree is not None else None
                figures = asyncio.run(run_round(by_name[lane].base, model, plan,
                                                seed=1000 * clients + r,
                                                shape=by_name[lane].shape))
                if tree is not None and before is not None:
                    after = cpu_seconds(tree)
                    figures["server_cpu_s"] = after[0] - before[0]  # the server's Python
                    figures["engine_cpu_s"] = after[1] - before[1]  # its engine processes
                progress(f"{lane} {clients} clients, round {r + 1}/{rounds}: wall "
                         f"{figures['wall_s']:.2f} s, p95 TTFT {figures['ttft_p95_s']:.2f} s,"
                         f" {figures['errors']} errors")
                measured[lane].append(figures)
        for lane in lanes:
            best = min(measured[lane], key=lambda f: f["wall_s"])
            servers[lane][str(clients)] = {"best": _without_detail(best),
                                           "rounds": measured[lane]}
    return servers


def _without_detail(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in figures.items() if k != "requests_detail"}


def ratios(servers: dict[str, Any]) -> dict[str, Any]:
    """Each Tandem lane over its yardstick, per client count: wall and p95 TTFT, best over
    best and the median of the paired rounds, and the target. Met is judged on the paired
    median: a round's wall varies by 10-20% on this machine, and the best of a few rounds
    favours whichever lane varies most."""
    out: dict[str, Any] = {}
    for lane, yardstick, limit in COMPARISONS:
        if lane not in servers or yardstick not in servers:
            continue
        for clients, figures in servers[lane].items():
            base = servers[yardstick].get(clients)
            if base is None:
                continue
            ours, theirs = figures["best"], base["best"]
            wall = ours["wall_s"] / theirs["wall_s"]
            ttft = (ours["ttft_p95_s"] / theirs["ttft_p95_s"]
                    if ours["ttft_p95_s"] and theirs["ttft_p95_s"] else None)
            paired = ratio_medians(*paired_ratios(figures["rounds"], base["rounds"]))
            name = f"{lane}@{clients}" + ("" if yardstick == "vllm" else f" / {yardstick}")
            out[name] = {"wall_ratio": wall, "ttft_p95_ratio": ttft, "target": limit,
                         "met": within(paired, limit), **paired}
    return out


def within(paired: dict[str, Any], limit: float | None) -> bool | None:
    """Both paired medians at or under `limit`; None when there is no target."""
    if limit is None:
        return None
    ttft = paired.get("ttft_p95_ratio_median")
    return paired["wall_ratio_median"] <= limit and (ttft is None or ttft <= limit)


def paired_ratios(ours: list[dict[str, Any]],
                  theirs: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Round r of a lane over round r of its yardstick (interleaved runs): the wall ratios
    and the p95 TTFT ratios (rounds with streamed requests only)."""
    pairs = list(zip(ours, theirs, strict=False))
    walls = [a["wall_s"] / b["wall_s"] for a, b in pairs]
    ttfts = [a["ttft_p95_s"] / b["ttft_p95_s"] for a, b in pairs
             if a["ttft_p95_s"] and b["ttft_p95_s"]]
    return walls, ttfts


def ratio_medians(walls: list[float], ttfts: list[float]) -> dict[str, Any]:
    if not walls:
        return {}
    return {"wall_ratio_median": statistics.median(walls),
            "ttft_p95_ratio_median": statistics.median(ttfts) if ttfts else None}


def markdown(results: dict[str, Any]) -> str:
    lines = [f"# Load: {results['environment']['profile']}, "
             f"{results['config']['max_tokens']} sampled tokens (seeded), prompts of "
             f"{results['config']['prompt_words']} words, half streamed", "",
             "| server | clients | prompt tokens (mean) | wall (s) | tokens/s "
             "| latency p50 / p95 / p99 (s) | TTFT p50 / p95 / p99 (s) | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lane, by_clients in results["servers"].items():
        for clients, figures in by_clients.items():
            b = figures["best"]
            lines.append(
                f"| {lane} | {clients} | {b.get('prompt_tokens_mean') or 0:.0f} | "
                f"{b['wall_s']:.2f} | {b['output_tokens_per_s']:.0f} | "
                f"{b['latency_p50_s']:.2f} / {b['latency_p95_s']:.2f} / "
                f"{b['latency_p99_s']:.2f} | {b['ttft_p50_s']:.2f} / {b['ttft_p95_s']:.2f} / "
                f"{b['ttft_p99_s']:.2f} | {b['errors']} |")
    if results["ratios"]:
        lines += ["", "| lane | wall / vLLM (best) | p95 TTFT / vLLM (best) | wall / vLLM "
                  "(median of paired rounds) | p95 TTFT (median of paired) | target | met "
                  "(paired) |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for name, r in results["ratios"].items():
            cells = [ratio_text(r["wall_ratio"]), ratio_text(r["ttft_p95_ratio"]),
                     ratio_text(r.get("wall_ratio_median")),
                     ratio_text(r.get("ttft_p95_ratio_median")), target_text(r["target"]),
                     met_text(r["met"])]
            lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def ratio_text(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def target_text(limit: float | None) -> str:
    return "-" if limit is None else f"<= {limit:.2f}x"


def met_text(met: bool | None) -> str:
    return "-" if met is None else ("yes" if met else "no")


def plot(results: dict[str, Any], path: Path) -> None:
    """Per lane and client count: the median round's wall and p95 TTFT, whiskers from the
    fastest round to the slowest (the spread a single round's figure carries)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    servers = results["servers"]
    counts = sorted({int(c) for lane in servers.values() for c in lane})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    width = 0.8 / max(1, len(servers))
    for i, (lane, by_clients) in enumerate(servers.items()):
        xs = [j + i * width for j in range(len(counts))]
        for ax, key in zip(axes, ("wall_s", "ttft_p95_s"), strict=True):
            spreads = [_spread(by_clients.get(str(c)), key) for c in counts]
            medians = [m for m, _, _ in spreads]
            whiskers = [[m - lo for m, lo, _ in spreads], [hi - m for m, _, hi in spreads]]
            ax.bar(xs, medians, width, yerr=whiskers, capsize=3, label=lane)
    for ax, title in zip(axes, ("wall for all requests (s), median round",
                                "p95 TTFT (s), median round"), strict=True):
        ax.set_xticks([j + width * (len(servers) - 1) / 2 for j in range(len(counts))],
                      [f"{c} clients" for c in counts])
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _spread(figures: dict[str, Any] | None, key: str) -> tuple[float, float, float]:
    """(median, least, most) of one figure over a lane's rounds."""
    values = [r[key] for r in (figures or {}).get("rounds", ()) if r.get(key) is not None]
    if not values:
        return 0.0, 0.0, 0.0
    return statistics.median(values), min(values), max(values)


def write_report(results: dict[str, Any], out_dir: Path) -> str:
    return write_run(out_dir, results, markdown(results),
                     lambda folder: plot(results, folder / PLOT))


def run_load_bench(profile: Profile, client_counts: list[int], against_vllm: bool,
                   rounds: int = 5, out_dir: Path | None = None) -> dict[str, Any]:
    model_path = resolve_model_path(profile, tandem_home(), say)
    starts: list[tuple[str, Callable[[], Any]]] = []
    if against_vllm:
        starts.append(("vllm", lambda: vllm_server(profile)))
    facts = load_facts(FACTS)
    starts += [("memory_off", lambda: tandem_server(profile, "off")),
               ("memory_on", lambda: tandem_server(profile, "on")),
               ("memory_on_notes", lambda: tandem_server(profile, "on", facts))]
    with ExitStack() as stack:
        lanes: dict[str, Lane] = {}
        for name, start in starts:
            say(f"starting {name}")
            lanes[name] = Lane(stack.enter_context(start()))
        if against_vllm:  # the same server, each request with memory on's hidden tokens
            lanes["vllm_memory_tokens"] = Lane(lanes["vllm"].base, memory_tokens_shape())
        servers = measure_interleaved(lanes, profile.name, client_counts, rounds)
    plan = LoadPlan(clients=0)
    results = {
        "environment": environment(profile, model_path),
        "config": {"clients": client_counts, "rounds": rounds, "max_tokens": plan.max_tokens,
                   "prompt_words": f"{plan.min_words}-{plan.max_words}",
                   "streamed_share": plan.streamed_share, "interleaved": True,
                   "started": datetime.now().isoformat(timespec="seconds")},
        "servers": servers,
    }
    results["ratios"] = ratios(servers)
    out = out_dir or RESULTS / profile.name
    print(write_report(results, out))
    say(f"written to {out}")
    return results
