"""The `tandem` command: serve a profile, list profiles, build the embedded models."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from conductor.ledger.records import MAX_TOKENS
from engine.home import tandem_home
from engine.profiles import (
    ProfileError,
    default_profile_name,
    load_profile,
    profile_names,
)
from server.cli import admin as admin_cli
from server.cli import jobs as jobs_cli
from server.cli import mcp as mcp_cli
from server.cli import memory as memory_cli
from server.cli import notes as notes_cli
from server.cli import proxy as proxy_cli
from server.cli.serve import (  # noqa: F401 (tests and the bench name them from here)
    ENGINE_DEAD_EXIT,
    _resolve_profile,
    _say,
    add_serve_arguments,
    bind_listener,
    run_serve,
    server_config,
)

DEFAULT_LOAD_CLIENTS = "32,128"
DEFAULT_ROUNDS = 5


def _profiles(_args: argparse.Namespace) -> int:
    default = default_profile_name()
    rows = []
    for name in profile_names():
        try:
            profile = load_profile(name)
            rows.append((name, profile.model, profile.memory.mode, profile.device))
        except ProfileError as exc:
            rows.append((name, f"(invalid: {exc})", "-", "-"))
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'PROFILE':<{width}}{'DEVICE':<8}{'MEMORY':<8}MODEL")
    for name, model, memory, device in rows:
        mark = " (default)" if name == default else ""
        print(f"{name:<{width}}{device:<8}{memory:<8}{model}{mark}")
    return 0


def _build_model(args: argparse.Namespace) -> int:
    from engine.gguf_model import ModelBuildError
    from engine.model_builder import EMBEDDED_MODELS, ensure_model
    from engine.published_tokenizers import FetchError

    names = args.names or ["tiny-qwen3"]
    for name in names:
        if name not in EMBEDDED_MODELS:
            raise ProfileError(f"unknown embedded model {name!r}; known: "
                               f"{', '.join(EMBEDDED_MODELS)}")
        try:
            ensure_model(tandem_home(), name, _say)
        except (ModelBuildError, FetchError) as exc:
            print(f"tandem: {exc}", file=sys.stderr)
            return 2
    return 0


def _client_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ProfileError(f"--clients {text!r}: client counts, comma-separated (32,128)")
    return counts


def _bench(args: argparse.Namespace) -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if args.load:
        from bench.load.run import run_load_bench

        quick = args.quick
        run_load_bench(_resolve_profile(args.profile or "tiny"),
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
        run_index_bench(_resolve_profile(args.profile or "smol"),
                        None if args.no_load else _resolve_profile("tiny"), args.out, quick,
                        counts, rounds=args.rounds if args.rounds != DEFAULT_ROUNDS else 8,
                        names=args.variants.split(",") if args.variants else None)
        return 0
    if args.ledger:
        from bench.ledger.run import run_ledger_bench

        bound = _resolve_profile(args.profile).memory.ledger_max_tokens if args.profile \
            else MAX_TOKENS
        results = run_ledger_bench(args.out, args.quick, bound)
        return 0 if results["misses"] == 0 else 1
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
        results = run_soak_bench(_resolve_profile(args.profile or "tiny"), plan, args.out)
        return 0 if results["passed"] else 1
    if args.against_vllm or args.clients != DEFAULT_LOAD_CLIENTS:
        raise ProfileError("--clients and --against-vllm go with --load")
    if args.quality:
        from bench.quality.facts import FactSetError
        from bench.quality.run import run_quality_bench

        try:
            run_quality_bench(_resolve_profile(args.profile or "smol"), args.facts, args.out,
                              args.quick)
        except (FactSetError, OSError) as exc:
            print(f"tandem: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.facts is not None:
        raise ProfileError("--facts goes with --quality")
    from bench.lanes.run import run_bench

    run_bench(_resolve_profile(args.profile or "bench-0.6b"), quick=args.quick,
              out_dir=args.out)
    return 0


def _keys(args: argparse.Namespace) -> int:
    from server.access.keys import KeysError, KeyStore

    store = KeyStore(tandem_home())
    try:
        if args.keys_command == "add":
            from conductor.memory.services import MemorySettings

            if args.label == MemorySettings().user_name:
                raise KeysError(f"{args.label!r} is the engine's own user (its memory is the "
                                "server owner's): give the person a name of their own")
            key = store.add(args.label)
            print(key)
            print(f"[tandem] the key for {args.label!r}; it is shown once and stored only as "
                  "a hash", file=sys.stderr)
        elif args.keys_command == "revoke":
            store.revoke(args.label)
            print(f"[tandem] revoked the key of {args.label!r}", file=sys.stderr)
        else:
            for entry in store.list():
                print(f"{entry.label}\t{entry.created}")
    except KeysError as exc:
        print(f"tandem: {exc}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tandem", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve a profile on an OpenAI-compatible API")
    add_serve_arguments(serve)
    serve.set_defaults(func=run_serve)

    profiles = commands.add_parser("profiles", help="list the profiles")
    profiles.set_defaults(func=_profiles)

    build = commands.add_parser("build-model", help="build the embedded models (no download)")
    build.add_argument("names", nargs="*", help="tiny-qwen3 (default), qwen3-0.6b-shape, "
                       "smollm2-135m")
    build.set_defaults(func=_build_model)

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
    bench.add_argument("--screen", action="store_true", help="the Memory screen's requests on "
                       "a store of 10,000 notes (no engine)")
    bench.add_argument("--proxy", action="store_true", help="proxy mode against plain "
                       "vLLM's and llama.cpp's servers on smol: each turn's cached fraction "
                       "through the proxy against direct, and the proxy's own overhead")
    bench.add_argument("--soak", action="store_true", help="clients for a fixed time with "
                       "memory, the writer and the jobs on, then every acknowledged note "
                       "checked on disk and the engine idle (default profile: tiny)")
    bench.add_argument("--duration", type=float, default=120.0, help="--soak: seconds of "
                       "load (default 120)")
    bench.add_argument("--clients", default=DEFAULT_LOAD_CLIENTS,
                       help="--load: client counts, comma-separated (default: 32,128); "
                       "--soak: one count (default 32)")
    bench.add_argument("--against-vllm", action="store_true", help="--load: the same load "
                       "against plain vLLM's own server with the profile's engine settings")
    bench.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="--load: measured "
                       "rounds per client count; the paired median is judged (default 5; "
                       "8 with --index)")
    bench.add_argument("--quick", action="store_true", help="a short run (about 2 minutes on "
                       "tiny)")
    bench.add_argument("--out", type=Path, help="results folder (default: "
                       "bench/results/<profile>-<timestamp>)")
    bench.set_defaults(func=_bench)

    notes_cli.register(commands)
    memory_cli.register(commands, default_profile_name)
    mcp_cli.register(commands)
    jobs_cli.register(commands, default_profile_name)
    keys = commands.add_parser("keys", help="named API keys: each key's label is its user")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    add = keys_commands.add_parser("add", help="make a key for LABEL and print it once")
    add.add_argument("label")
    keys_commands.add_parser("list", help="the labels and when their keys were made")
    revoke = keys_commands.add_parser("revoke", help="the key stops working at once")
    revoke.add_argument("label")
    keys.set_defaults(func=_keys)
    admin_cli.register(commands)
    proxy_cli.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ProfileError as exc:
        print(f"tandem: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
