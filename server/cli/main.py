"""The `tandem` command: serve a profile, list profiles, build the embedded models."""

from __future__ import annotations

import argparse
import sys

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
from server.cli.plugins import register_plugins
from server.cli.serve import (  # noqa: F401 (tests and the bench name them from here)
    ENGINE_DEAD_EXIT,
    _resolve_profile,
    _say,
    add_serve_arguments,
    bind_listener,
    run_serve,
    server_config,
)


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


def _check_profiles(args: argparse.Namespace) -> int:
    from server.cli.profiles_check import run_check

    return run_check(args.names, tandem_home())


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


def _keys(args: argparse.Namespace) -> int:
    from server.access.keys import KeysError, KeyStore, same_user

    store = KeyStore(tandem_home())
    try:
        if args.keys_command == "add":
            from conductor.memory.services import MemorySettings

            if same_user(args.label, MemorySettings().user_name):  # any spelling
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
    checks = profiles.add_subparsers(dest="profiles_command")
    check = checks.add_parser("check", help="load each profile strictly and check a hybrid "
                              "model's cache settings against what vLLM sets (no GPU)")
    check.add_argument("names", nargs="*", help="profile names (default: all)")
    check.set_defaults(func=_check_profiles)

    build = commands.add_parser("build-model", help="build the embedded models (no download)")
    build.add_argument("names", nargs="*", help="tiny-qwen3 (default), qwen3-0.6b-shape, "
                       "smollm2-135m")
    build.set_defaults(func=_build_model)

    # `tandem bench` and any other package's subcommand: found through their entry
    # points, so the CLI imports nothing of theirs (ARCHITECTURE.md: arrows point down).
    register_plugins(commands, _resolve_profile)

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
