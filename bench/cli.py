"""`tandem bench`: the bench's own subcommand, which the CLI finds through the entry point
``[project.entry-points."tandem.cli"] bench = "bench.cli:register"`` (pyproject.toml), so
the server imports nothing from the bench (ARCHITECTURE.md: arrows point down only)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from conductor.ledger.records import MAX_TOKENS
from engine.profiles import Profile, ProfileError

DEFAULT_LOAD_CLIENTS = "32,128"
DEFAULT_ROUNDS = 5

# The CLI's reading of --profile (a name or a YAML path), handed in so that the bench
# reads it exactly as `tandem serve` does without importing the CLI.
ResolveProfile = Callable[[str | None], Profile]


def _client_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ProfileError(f"--clients {text!r}: client counts, comma-separated (32,128)")
    return counts


def run(args: argparse.Namespace, resolve_profile: ResolveProfile) -> int:
    """Run the bench `args` ask for; the exit status (1: a bench's target was missed)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if args.load:
        from bench.load.run import run_load_bench

        quick = args.quick
        run_load_bench(resolve_profile(args.profile or "tiny"),
                       [4] if quick else _client_counts(args.clients), args.against_vllm,
                       rounds=1 if quick else args.rounds, out_dir=args.out)
        return 0
    if args.index:
        from bench.index.run import run_index_bench
        from bench.index.variants import variant_named

        quick = args.quick
        counts = None if args.clients == DEFAULT_LOAD_CLIENTS else _client_counts(args.clients)
        try:
            [variant_named(name) for name in (args.variants or "").split(",") if name]
        except ValueError as exc:
            print(f"tandem: {exc}", file=sys.stderr)
            return 2
        run_index_bench(resolve_profile(args.profile or "smol"),
                        None if args.no_load else resolve_profile("tiny"), args.out, quick,
                        counts, rounds=args.rounds if args.rounds != DEFAULT_ROUNDS else 8,
                        names=args.variants.split(",") if args.variants else None)
        return 0
    if args.ledger:
        from bench.ledger.run import run_ledger_bench

        bound = resolve_profile(args.profile).memory.ledger_max_tokens if args.profile \
            else MAX_TOKENS
        results = run_ledger_bench(args.out, args.quick, bound)
        return 0 if results["misses"] == 0 else 1
    if args.overhead:
        from bench.overhead.run import run_overhead_bench

        results = run_overhead_bench(resolve_profile(args.profile or "bench-0.6b"), args.out,
                                     args.quick)
        return 0 if results["met"] else 1
    if args.screen:
        from bench.screen.run import run_screen_bench

        return 0 if run_screen_bench(args.out, args.quick)["within_target"] else 1
    if args.proxy:
        from bench.proxy.run import run_proxy_bench

        return 0 if run_proxy_bench(args.out, args.quick)["within_target"] else 1
    if args.soak:
        from bench.soak.drive import SoakPlan
        from bench.soak.run import run_soak_bench

        clients = 4 if args.quick else int(args.clients if args.clients != DEFAULT_LOAD_CLIENTS
                                           else 32)
        plan = SoakPlan(clients=clients, duration_s=20 if args.quick else args.duration)
        results = run_soak_bench(resolve_profile(args.profile or "tiny"), plan, args.out)
        return 0 if results["passed"] else 1
    if args.replicas:
        from bench.replicas.drive import SoakPlan as ReplicasPlan
        from bench.replicas.soak import run_replicas_soak

        concurrency = 24 if args.clients == DEFAULT_LOAD_CLIENTS else int(args.clients)
        plan = ReplicasPlan(users=60 if args.quick else args.users, concurrency=concurrency)
        results = run_replicas_soak(plan, args.out)
        return 0 if results["notes"]["lost"] == 0 else 1
    if args.against_vllm or args.clients != DEFAULT_LOAD_CLIENTS:
        raise ProfileError("--clients and --against-vllm go with --load")
    if args.quality:
        from bench.quality.facts import FactSetError
        from bench.quality.run import run_quality_bench

        try:
            run_quality_bench(resolve_profile(args.profile or "smol"), args.facts, args.out,
                              args.quick)
        except (FactSetError, OSError) as exc:
            print(f"tandem: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.facts is not None:
        raise ProfileError("--facts goes with --quality")
    from bench.lanes.run import run_bench

    run_bench(resolve_profile(args.profile or "bench-0.6b"), quick=args.quick,
              out_dir=args.out)
    return 0


def register(commands: argparse._SubParsersAction, resolve_profile: ResolveProfile) -> None:
    """Add `tandem bench` to the CLI's subcommands (the ``tandem.cli`` entry point)."""
    bench = commands.add_parser("bench", help="measure TTFT, decode and prefix reuse per "
                                "memory mode, and background-turn preemption")
    bench.add_argument("--profile", help="profile name or YAML path (default: bench-0.6b; "
                       "smol with --quality)")
    bench.add_argument("--quality", action="store_true", help="answer quality with memory "
                       "off, on, naive and oracle, on a fact set (bench/quality/facts.jsonl)")
    bench.add_argument("--facts", type=Path, help="the fact set (JSON Lines) for --quality")
    bench.add_argument("--load", action="store_true", help="many clients at once against "
                       "Tandem, memory off and on (default profile: tiny)")
    bench.add_argument("--index", action="store_true", help="what the notes' index costs "
                       "and buys: strict accuracy on --profile (default smol) and load on "
                       "tiny (32 clients against plain vLLM), per variant of what the hidden "
                       "context shows")
    bench.add_argument("--no-load", action="store_true", help="--index: the accuracy half "
                       "only")
    bench.add_argument("--variants", help="--index: variant names, comma-separated "
                       "(default: all; bench/index/variants.py)")
    bench.add_argument("--ledger", action="store_true", help="the session ledger at agent "
                       "scale: 64 interleaved sessions of 30k ids, record misses and memory "
                       "(no engine; the bound is --profile's memory.ledger_max_tokens)")
    bench.add_argument("--overhead", action="store_true", help="the server's own work under "
                       "load: 1,000 users x 100 ledger records, 32 clients, an engine that "
                       "answers at once; the server's share of TTFT and the loop's stalls")
    bench.add_argument("--screen", action="store_true", help="the Memory screen's requests on "
                       "a store of 10,000 notes (no engine)")
    bench.add_argument("--proxy", action="store_true", help="proxy mode against plain "
                       "vLLM's and llama.cpp's servers on smol: each turn's cached fraction "
                       "through the proxy against direct, and the proxy's own overhead")
    bench.add_argument("--soak", action="store_true", help="clients for a fixed time with "
                       "memory, the writer and the jobs on, then every acknowledged note "
                       "checked on disk and the engine idle (default profile: tiny)")
    bench.add_argument("--replicas", action="store_true", help="etcd, 3 tiny replicas and "
                       "vllm-router on loopback, --users users of 2-3 turns through the "
                       "router: TTFT and cached fraction per user, the router's overhead "
                       "against the replica direct (bench/replicas)")
    bench.add_argument("--users", type=int, default=1000, help="--replicas: simulated users "
                       "(default 1000)")
    bench.add_argument("--duration", type=float, default=120.0, help="--soak: seconds of "
                       "load (default 120)")
    bench.add_argument("--clients", default=DEFAULT_LOAD_CLIENTS,
                       help="--load: client counts, comma-separated (default: 32,128); "
                       "--soak: one count (default 32); --replicas: users at once "
                       "(default 24)")
    bench.add_argument("--against-vllm", action="store_true", help="--load: the same load "
                       "against plain vLLM's own server with the profile's engine settings")
    bench.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="--load: measured "
                       "rounds per client count; the paired median is judged (default 5; "
                       "8 with --index)")
    bench.add_argument("--quick", action="store_true", help="a short run (about 2 minutes on "
                       "tiny)")
    bench.add_argument("--out", type=Path, help="results folder (default: "
                       "bench/results/<profile>-<timestamp>)")
    bench.set_defaults(func=lambda args: run(args, resolve_profile))
