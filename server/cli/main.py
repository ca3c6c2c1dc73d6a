"""The `tandem` command: serve a profile, list profiles, build the embedded models."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import time
from pathlib import Path

from conductor.ledger.records import MAX_TOKENS
from engine.home import tandem_home
from engine.profiles import (
    MEMORY_MODES,
    ProfileError,
    default_profile_name,
    load_profile,
    load_profile_file,
    profile_names,
    with_overrides,
)
from server.cli import admin as admin_cli
from server.cli import jobs as jobs_cli
from server.cli import memory as memory_cli
from server.cli import notes as notes_cli


def _say(message: str) -> None:
    print(f"[tandem] {message}", flush=True)


def _serve(args: argparse.Namespace) -> int:
    # vLLM's own INFO logs would bury the progress lines; TANDEM users can raise them back.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    profile = with_overrides(_resolve_profile(args.profile), args.memory, args.writer,
                             tuple(args.served_model_name), args.enable_force_include_usage,
                             args.return_tokens_as_token_ids, args.max_logprobs)
    started = time.monotonic()

    if args.root_path and (not args.root_path.startswith("/") or args.root_path.endswith("/")):
        raise ProfileError(f"--root-path {args.root_path!r}: a path that starts with / and "
                           "does not end with one (/llm)")
    # --uds: the socket alone, --host and --port unused (as vLLM's flag); only this
    # machine's processes reach it, so it is served as loopback is.
    host = "localhost" if args.uds else args.host
    where = (f"unix socket {args.uds}, {args.root_path or ''}/v1" if args.uds
             else f"http://{args.host}:{args.port}{args.root_path or ''}/v1")

    def ready() -> None:
        _say(f"ready in {time.monotonic() - started:.0f} s: {where} "
             f"(profile {profile.name}, memory {profile.memory.mode})")

    from conductor.storage.paths import valid_user
    from server.turn.memory import MemorySettings

    if args.user is not None and not valid_user(args.user):
        raise ProfileError(f"--user {args.user!r}: use letters, digits and . _ @ - only")
    settings = MemorySettings()
    settings = MemorySettings(
        user_name=(args.user or settings.user_name).lower(),
        trusted_proxies=frozenset(args.trusted_proxy) or settings.trusted_proxies,
        nightly_hour=settings.nightly_hour if args.nightly_hour is None else args.nightly_hour,
    )
    from server.access.auth import Auth, exposure_problem, is_loopback
    from server.access.browser_guard import BrowserPolicy
    from server.access.keys import KeyStore

    auth = Auth(api_key=args.api_key or os.environ.get("TANDEM_API_KEY") or None,
                keys=KeyStore(tandem_home()), engine_user=settings.user_name,
                required=not is_loopback(host) and not args.insecure_no_auth)
    problem = exposure_problem(host, auth, args.insecure_no_auth)
    if problem is not None:
        raise ProfileError(problem)
    # The port is taken now, before the engine's minute of loading: a port in use is told
    # at once, and no other process can take it while the engine loads.
    listener = None if args.uds else bind_listener(args.host, args.port)
    import uvicorn  # the app's imports (vLLM, torch) take seconds: after the port is ours

    from server.app import create_app

    engine_died: list[bool] = []

    def exit_for_restart() -> None:
        engine_died.append(True)
        # A moment of 503s on /readyz first, so a load balancer or a health check sees why
        # before the port closes.
        asyncio.get_running_loop().call_later(ENGINE_DEAD_DRAIN_S,
                                              lambda: setattr(server, "should_exit", True))

    browser = BrowserPolicy(listen_host=host,
                            allowed_hosts=frozenset(h.lower() for h in args.allowed_host),
                            allowed_origins=frozenset(o.lower().rstrip("/")
                                                      for o in args.allowed_origin))
    app = create_app(profile, tandem_home(), progress=_say, on_ready=ready,
                     memory_settings=settings, auth=auth, on_engine_dead=exit_for_restart,
                     browser=browser, root_path=args.root_path or "")
    server = uvicorn.Server(server_config(app, args.host, args.port, uds=args.uds))
    if listener is None:
        server.run()
    else:
        server.run(sockets=[listener])
    if engine_died:
        _say(f"the engine core process stopped; exiting with {ENGINE_DEAD_EXIT} so a "
             "supervisor restarts the server")
        # The app has shut down (the ledger saved, files closed). A normal exit would then
        # spend 3-7 s finalising torch, vLLM and tokenizer threads before the supervisor
        # can restart us: leave at once.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(ENGINE_DEAD_EXIT)
    return 0


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (not yet listening: a client meanwhile is refused, as
    by a closed port); uvicorn listens on it once the app has started."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ProfileError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                           "(another server on that port? choose one with --port)") from None
    return sock


def server_config(app, host: str, port: int, uds: str | None = None):
    """uvicorn's settings for `tandem serve`. The peer address is the connection's own:
    uvicorn's `proxy_headers` (on by default, trusting X-Forwarded-For from 127.0.0.1)
    would let any local process name another peer, and would turn a trusted proxy's
    requests into its clients' addresses, which `--trusted-proxy` does not trust. Only a
    trusted proxy relays anything, and it relays the user (X-Tandem-User), not an address.
    `uds`: listen on that Unix socket instead of host and port."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, uds=uds, log_level="warning",
                          proxy_headers=False, forwarded_allow_ips="",
                          timeout_graceful_shutdown=ENGINE_DEAD_GRACE_S)


DEFAULT_LOAD_CLIENTS = "32,128"

# A distinct status, so a supervisor's log tells an engine death from a bad command line.
ENGINE_DEAD_EXIT = 3
ENGINE_DEAD_GRACE_S = 5
ENGINE_DEAD_DRAIN_S = 2.0


def _resolve_profile(name: str | None):
    if name and (name.endswith((".yaml", ".yml")) or os.sep in name):
        return load_profile_file(Path(name))
    return load_profile(name or default_profile_name())


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
    if args.ledger:
        from bench.ledger.run import run_ledger_bench

        bound = _resolve_profile(args.profile).memory.ledger_max_tokens if args.profile \
            else MAX_TOKENS
        results = run_ledger_bench(args.out, args.quick, bound)
        return 0 if results["misses"] == 0 else 1
    if args.screen:
        from bench.screen.run import run_screen_bench

        return 0 if run_screen_bench(args.out, args.quick)["within_target"] else 1
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
        from bench.quality.run import FactSetError, run_quality_bench

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
            from server.turn.memory import MemorySettings

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
    serve.add_argument("--profile", help="profile name or YAML path (default: smol without a "
                       "GPU, chat with one)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--uds", metavar="PATH", help="listen on this Unix domain socket "
                       "instead of --host and --port (as vLLM's flag)")
    serve.add_argument("--root-path", metavar="PREFIX", help="the path prefix a proxy serves "
                       "the API under (/llm: /llm/v1/... and /v1/... both answer; as vLLM's "
                       "flag)")
    serve.add_argument("--served-model-name", action="append", default=[], metavar="NAME",
                       help="another name requests may give as 'model' (repeatable; as "
                       "vLLM's flag of that name)")
    serve.add_argument("--enable-force-include-usage", action="store_true",
                       help="usage in every streamed chunk, whatever the request's "
                       "stream_options (as vLLM's flag)")
    serve.add_argument("--max-logprobs", type=int, metavar="N",
                       help="the most log-probabilities a token a request may ask for "
                       "(default 20; -1: the whole vocabulary, asked for with -1)")
    serve.add_argument("--return-tokens-as-token-ids", action="store_true",
                       help="name tokens 'token_id:<id>' in log-probabilities unless a "
                       "request says otherwise (as vLLM's flag)")
    serve.add_argument("--memory", choices=MEMORY_MODES, help="override the profile's memory mode")
    serve.add_argument("--writer", choices=MEMORY_MODES,
                       help="override the profile's background writer mode")
    serve.add_argument("--user", help="the engine's own user name for local clients "
                       "(default: $TANDEM_USER or the OS user)")
    serve.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDR",
                       help="a proxy address whose requests carry X-Tandem-User (repeatable)")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="another host name the server answers as (repeatable; IP "
                       "addresses, localhost and --host always)")
    serve.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="a web origin (https://app.example) whose pages may call the "
                       "server, with CORS (repeatable; none by default)")
    serve.add_argument("--nightly-hour", type=int, choices=range(24), metavar="0-23",
                       help="hour of the daily notes job (default: $TANDEM_NIGHTLY_HOUR or 3)")
    serve.add_argument("--api-key", help="every /v1 route needs 'Authorization: Bearer "
                       "KEY' (default: $TANDEM_API_KEY); named keys: tandem keys add")
    serve.add_argument("--insecure-no-auth", action="store_true",
                       help="serve a non-loopback --host with no API key (anyone who reaches "
                       "the port reads and writes this user's memory)")
    serve.set_defaults(func=_serve)

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
    bench.add_argument("--ledger", action="store_true", help="the session ledger at agent "
                       "scale: 64 interleaved sessions of 30k ids, record misses and memory "
                       "(no engine; the bound is --profile's memory.ledger_max_tokens)")
    bench.add_argument("--screen", action="store_true", help="the Memory screen's requests on "
                       "a store of 10,000 notes (no engine)")
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
    bench.add_argument("--rounds", type=int, default=5, help="--load: measured rounds per "
                       "client count; the paired median is judged (default 5)")
    bench.add_argument("--quick", action="store_true", help="a short run (about 2 minutes on "
                       "tiny)")
    bench.add_argument("--out", type=Path, help="results folder (default: "
                       "bench/results/<profile>-<timestamp>)")
    bench.set_defaults(func=_bench)

    notes_cli.register(commands)
    memory_cli.register(commands, default_profile_name)
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
