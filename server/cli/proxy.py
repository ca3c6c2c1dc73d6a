"""``tandem proxy``: the same server as `tandem serve`, memory and all, in front of another
OpenAI-compatible server that takes token-id prompts (vLLM's, llama.cpp's).

    tandem proxy --backend http://127.0.0.1:8001 [--model NAME] [--tokenizer PATH]
                 [--backend-key-env VAR] [every `tandem serve` flag]

The profile still says the memory switches, the context length and the chat template's
tool-call format; `--tokenizer` (default: the profile's model) must be the backend
model's, since the proxy renders prompts to ids itself and hands the backend those ids.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from engine.profiles import ProfileError
from server.cli.serve import add_serve_arguments, run_serve


def register(subparsers: Any) -> None:
    proxy = subparsers.add_parser("proxy", help="serve with memory in front of another "
                                  "OpenAI-compatible server (token-id prompts)")
    add_serve_arguments(proxy)
    proxy.add_argument("--backend", required=True, metavar="URL",
                       help="the backend's base URL (http://host:port, without /v1)")
    proxy.add_argument("--model", help="the model name the backend serves (default: the "
                       "first of its /v1/models)")
    proxy.add_argument("--tokenizer", help="the backend model's tokenizer, a path or hub id "
                       "(default: the profile's model)")
    proxy.add_argument("--backend-key-env", metavar="VAR",
                       help="the environment variable holding the backend's API key")
    proxy.add_argument("--backend-runs-kernels", action="store_true",
                       help="the backend loads Tandem's logits processors (tests: scripted "
                       "answers)")
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
    return run_serve(args, lambda profile: backend_engine(profile, args, key))


def backend_engine(profile, args: argparse.Namespace, key: str | None):
    """The HttpEngine for the backend, its model checked against the backend's list."""
    import httpx

    from engine.engine import load_tokenizer, resolve_model_path
    from engine.home import tandem_home
    from engine.proxy.http_backend import HttpEngine

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        listed = httpx.get(f"{args.backend.rstrip('/')}/v1/models", headers=headers,
                           timeout=10).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ProfileError(f"--backend {args.backend}: its /v1/models cannot be read "
                           f"({type(exc).__name__}: {exc})") from None
    names = [m.get("id") for m in listed if isinstance(m, dict)]
    model = args.model or (names[0] if names else None)
    if model is None or model not in names:
        raise ProfileError(f"--model {model!r}: the backend serves {', '.join(map(str, names))}")
    tokenizer = load_tokenizer(args.tokenizer or resolve_model_path(
        profile, tandem_home(), lambda _m: None))
    return HttpEngine(profile, tokenizer, args.backend, model, api_key=key,
                      scripted_kernels=args.backend_runs_kernels)
