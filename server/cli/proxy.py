"""``tandem proxy``: the same server as `tandem serve`, memory and all, in front of another
OpenAI-compatible server that takes token-id prompts (vLLM's, llama.cpp's).

    tandem proxy --backend http://127.0.0.1:8001 [--model NAME] [--tokenizer PATH]
                 [--backend-key-env VAR] [every `tandem serve` flag]

The profile still says the memory switches, the context length and the chat template's
tool-call format; `--tokenizer` (default: the profile's model) must be the backend
model's, since the proxy renders prompts to ids itself and hands the backend those ids.

The background writer runs on the backend. On a paid backend (one that takes a key and is
not on this machine or its network, or one named `--paid`) it is off unless asked for, and
then needs `--price`: each run is estimated first and refused past the daily cap.

A backend with no prefix cache a user (llama.cpp's server, a plain OpenAI API: no
`cache_salt`) serves one user: a server that several users may reach through it (named
keys, a trusted proxy) is refused at start unless `--shared-backend-cache` says the cache
may be shared, and the start says which it is.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
from typing import Any
from urllib.parse import urlsplit

from engine.profiles import ProfileError
from server.cli.serve import add_serve_arguments, run_serve
from server.idle.writer_budget import (
    DAILY_USD,
    MAX_PROMPT_TOKENS,
    RUNS_PER_DAY,
    WriterPolicy,
)


def register(subparsers: Any) -> None:
    proxy = subparsers.add_parser("proxy", help="serve with memory in front of another "
                                  "OpenAI-compatible server (token-id prompts)")
    add_serve_arguments(proxy, proxy=True)
    proxy.add_argument("--backend", required=True, metavar="URL",
                       help="the backend's base URL (http://host:port, or the /v1 form "
                       "OpenAI clients take: http://host:port/v1)")
    proxy.add_argument("--model", help="the model name the backend serves (default: the "
                       "first of its /v1/models)")
    proxy.add_argument("--tokenizer", help="the backend model's tokenizer, a path or hub id "
                       "(default: the profile's model)")
    proxy.add_argument("--backend-key-env", metavar="VAR",
                       help="the environment variable holding the backend's API key")
    proxy.add_argument("--backend-kind", choices=("auto", "vllm", "llama.cpp", "openai"),
                       default="auto", help="the backend's server (default: as its "
                       "/v1/models says: owned_by vllm or llamacpp; any other is a plain "
                       "OpenAI API, served through its chat route)")
    proxy.add_argument("--backend-wire", choices=("auto", "completions", "chat"),
                       default="auto", help="token-id prompts to /v1/completions, or "
                       "messages to /v1/chat/completions (default: completions for vLLM "
                       "and llama.cpp, chat for a plain OpenAI API)")
    proxy.add_argument("--shared-backend-cache", action="store_true",
                       help="serve several users on a backend that keeps one prefix cache "
                       "for all (llama.cpp's server, a plain OpenAI API): how much of a "
                       "prompt is cached then tells one user what another sent (default: "
                       "one user on such a backend)")
    proxy.add_argument("--backend-runs-kernels", action="store_true",
                       help="the backend loads Tandem's logits processors (tests: scripted "
                       "answers)")
    paid = proxy.add_mutually_exclusive_group()
    paid.add_argument("--paid", dest="paid", action="store_const", const=True,
                      help="the backend bills by the token (default: when it takes a key "
                      "and is not on this machine or a private network)")
    paid.add_argument("--free", dest="paid", action="store_const", const=False,
                      help="the backend does not bill by the token")
    proxy.add_argument("--price", metavar="IN,OUT", help="a paid backend's price in USD a "
                       "million prompt and completion tokens (0.15,0.60): the writer's "
                       "budget is estimated from it")
    proxy.add_argument("--writer-daily-usd", type=float, default=DAILY_USD, metavar="USD",
                       help=f"the writer's daily spend cap on a paid backend ({DAILY_USD})")
    proxy.add_argument("--writer-runs-per-day", type=int, default=RUNS_PER_DAY, metavar="N",
                       help=f"the writer's runs a day on a paid backend ({RUNS_PER_DAY})")
    proxy.add_argument("--writer-max-prompt", type=int, default=MAX_PROMPT_TOKENS,
                       metavar="TOKENS", help="the writer's largest prompt on a paid "
                       f"backend ({MAX_PROMPT_TOKENS})")
    proxy.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    key = None
    if args.backend_key_env:
        key = os.environ.get(args.backend_key_env)
        if not key:
            raise ProfileError(f"--backend-key-env {args.backend_key_env}: that variable is "
                               "not set")
    if not args.backend.startswith(("http://", "https://")):
        raise ProfileError(f"--backend {args.backend!r}: give a URL (http://host:port)")
    args.backend = backend_base(args.backend)
    args.writer, policy = writer_setup(args, key)
    paid = is_paid(args.backend, key, args.paid)
    model, kind, wire = backend_model(args, key)
    cache_sharing(args, kind)
    return run_serve(args, lambda profile: backend_engine(profile, args, key, model, kind,
                                                          wire),
                     writer_policy=policy, profile_for=jobs_off if paid else None)


def backend_base(url: str) -> str:
    """The backend's root: every OpenAI client's base URL ends in /v1, and the proxy adds
    /v1/models, /v1/completions ... itself, so either form names the same server."""
    return url.rstrip("/").removesuffix("/v1").rstrip("/")


def jobs_off(profile):
    """The cognition jobs have no budget yet: on a paid backend they run only when asked."""
    import dataclasses

    if profile.memory.jobs_mode != "off":
        print("[tandem] the cognition jobs are off on a paid backend (they have no budget "
              "yet): POST /v1/conductor/jobs/<job>/run runs one", flush=True)
    return dataclasses.replace(profile, memory=dataclasses.replace(profile.memory,
                                                                   jobs_mode="off"))


def is_paid(backend: str, key: str | None, said: bool | None) -> bool:
    """Whether the backend bills by the token: as said, else when it takes a key and its
    host is neither this machine nor a private network's."""
    if said is not None:
        return said
    host = (urlsplit(backend).hostname or "").lower()
    if key is None or host == "localhost" or host.endswith((".local", ".internal", ".lan")):
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return True  # a public name with a key: a provider's API
    return not (address.is_loopback or address.is_private or address.is_link_local)


def writer_setup(args: argparse.Namespace, key: str | None) -> tuple[str, WriterPolicy | None]:
    """The writer's mode (`auto` resolved) and, on a paid backend, its budget."""
    paid = is_paid(args.backend, key, args.paid)
    mode = args.writer
    if mode == "auto":
        mode = "off" if paid else "on"
    if mode == "off":
        return mode, None
    if not paid:  # no limit; the spend ledger still says what the writer asked of it
        return mode, WriterPolicy(0.0, 0.0, backend=f"{args.backend}|{args.model or ''}",
                                  paid=False)
    if not args.price:
        raise ProfileError("the backend is a paid model: give --price IN,OUT (USD a million "
                           "prompt and completion tokens) for the writer's budget, or "
                           "--writer off (or --free if it does not bill)")
    try:
        price_in, price_out = (float(part) for part in args.price.split(","))
    except ValueError:
        raise ProfileError(f"--price {args.price!r}: two numbers, IN,OUT (0.15,0.60)") from None
    limits = (price_in, price_out, args.writer_daily_usd, args.writer_runs_per_day,
              args.writer_max_prompt)
    if not all(math.isfinite(x) for x in limits) or min(limits) < 0 \
            or price_in + price_out == 0:
        raise ProfileError("--price and the writer's limits: numbers of at least 0, and a "
                           "price above 0 (a backend that does not bill: --free)")
    return mode, WriterPolicy(*limits, backend=f"{args.backend}|{args.model or ''}")


def cache_sharing(args: argparse.Namespace, kind: str) -> None:
    """On a backend with one prefix cache for all users: refused where several users may
    be served and the operator did not say it may be shared; said at start either way."""
    from engine.proxy.dialects import DIALECTS

    if DIALECTS[kind].salts_cache:
        return
    if args.shared_backend_cache:
        print(f"[tandem] the backend ({kind}) keeps one prefix cache for all users, shared "
              "among them (--shared-backend-cache): how much of a prompt is cached can tell "
              "one user what another sent", flush=True)
        return
    users = users_at_start(args)
    if users is None or len(users) > 1:
        who = ("a trusted proxy relays any user" if users is None
               else f"{len(users)} users have keys: {', '.join(sorted(users.values()))}")
        raise ProfileError(f"the backend ({kind}) keeps one prefix cache for all users and "
                           f"this server would serve several ({who}): one user's cached "
                           "prompts would show to another; serve one user, or share the "
                           "cache knowingly with --shared-backend-cache")
    print(f"[tandem] the backend ({kind}) keeps one prefix cache for all users: this "
          "server serves one user on it (another user's requests are refused; "
          "--shared-backend-cache shares it)", flush=True)


def users_at_start(args: argparse.Namespace) -> dict[str, str] | None:
    """The users the server may serve as it starts (None: any a trusted proxy names), by
    folder (`user_folder`: josé, José and its decomposed spelling are one user), each with
    a name it goes by: the named keys' labels, and the engine's own user where it has a
    key of its own or no named key answers instead."""
    from conductor.memory.settings import MemorySettings
    from engine.home import tandem_home
    from server.access.keys import KeyStore, label_folder

    settings = MemorySettings()
    if args.trusted_proxy or settings.trusted_proxies:
        return None
    users: dict[str, str] = {}
    for entry in KeyStore(tandem_home()).list():
        # a label that names no one is served to no one; counted apart all the same
        users.setdefault(label_folder(entry.label) or entry.label, entry.label)
    if args.api_key or os.environ.get("TANDEM_API_KEY") or not users:
        own = args.user or settings.user_name
        users.setdefault(label_folder(own) or own.lower(), own)
    return users


def backend_model(args: argparse.Namespace, key: str | None) -> tuple[str, str, str]:
    """The backend's model (checked against its list), kind and wire."""
    import httpx

    from engine.proxy.dialects import dialect_for_owner

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        listed = httpx.get(f"{args.backend.rstrip('/')}/v1/models", headers=headers,
                           timeout=10).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ProfileError(f"--backend {args.backend}: its /v1/models cannot be read "
                           f"({type(exc).__name__}: {exc})") from None
    entries = {m.get("id"): m for m in listed if isinstance(m, dict)}
    model = args.model or next(iter(entries), None)
    if model is None or model not in entries:
        raise ProfileError(f"--model {model!r}: the backend serves "
                           f"{', '.join(map(str, entries))}")
    kind = args.backend_kind
    if kind == "auto":
        kind = dialect_for_owner(entries[model].get("owned_by")) or "openai"
    wire = args.backend_wire
    if wire == "auto":
        wire = "chat" if kind == "openai" else "completions"
    if kind == "openai" and wire == "completions":
        raise ProfileError("--backend-wire completions: a plain OpenAI API takes no token-id "
                           "prompts; use --backend-wire chat, or --backend-kind vllm or "
                           "llama.cpp if the server is one of them")
    return model, kind, wire


def backend_engine(profile, args: argparse.Namespace, key: str | None, model: str,
                   kind: str, wire: str):
    """The HttpEngine for the backend's model."""
    from engine.engine import load_tokenizer, resolve_model_path
    from engine.home import tandem_home
    from engine.proxy.http_backend import HttpEngine

    tokenizer = load_tokenizer(args.tokenizer or resolve_model_path(
        profile, tandem_home(), lambda _m: None))
    return HttpEngine(profile, tokenizer, args.backend, model, api_key=key,
                      scripted_kernels=args.backend_runs_kernels, kind=kind, wire=wire,
                      shared_cache=args.shared_backend_cache)
