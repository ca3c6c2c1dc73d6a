"""`tandem serve` (and `tandem proxy`, which serves the same app over another engine):
the command line, the listening socket and uvicorn's settings."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.home import tandem_home
from engine.profiles import (
    MEMORY_MODES,
    ProfileError,
    default_profile_name,
    load_profile,
    load_profile_file,
    with_overrides,
)


def _say(message: str) -> None:
    print(f"[tandem] {message}", flush=True)


# A distinct status, so a supervisor's log tells an engine death from a bad command line.
ENGINE_DEAD_EXIT = 3
# ... and an engine that cannot load at all (a profile past the model's positions, a model
# that is not there): running on with /readyz 503 for ever would hide it from a supervisor.
ENGINE_LOAD_FAILED_EXIT = 4
ENGINE_DEAD_GRACE_S = 5
ENGINE_DEAD_DRAIN_S = 2.0


def _resolve_profile(name: str | None):
    if name and (name.endswith((".yaml", ".yml")) or os.sep in name):
        return load_profile_file(Path(name))
    return load_profile(name or default_profile_name())


def add_serve_arguments(serve: argparse.ArgumentParser, proxy: bool = False) -> None:
    """The flags `tandem serve` and `tandem proxy` share (the proxy's --writer also takes
    `auto`, its default)."""
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
    if proxy:
        serve.add_argument("--writer", choices=(*MEMORY_MODES, "auto"), default="auto",
                           help="the background writer on the backend (default auto: on, "
                           "off on a paid backend)")
    else:
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
    serve.add_argument("--disable-access-log", "--disable-uvicorn-access-log",
                       dest="disable_access_log", action="store_true",
                       help="no access log (a line a request on stdout: client, method, path, "
                       "status, time, tokens; vLLM's flag name is accepted)")
    serve.add_argument("--insecure-no-auth", action="store_true",
                       help="serve a non-loopback --host with no API key (anyone who reaches "
                       "the port reads and writes this user's memory)")


def run_serve(args: argparse.Namespace, engine_for: Callable | None = None,
              writer_policy=None, profile_for: Callable | None = None) -> int:
    """Serve the profile; `engine_for(profile)` gives the engine (proxy mode's backend)
    instead of loading vLLM in this process; `writer_policy` is its backend's price and
    limits; `profile_for(profile)` adjusts the profile (proxy mode on a paid backend)."""
    # vLLM's own INFO logs would bury the progress lines; TANDEM users can raise them back.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    profile = with_overrides(_resolve_profile(args.profile), args.memory, args.writer,
                             tuple(args.served_model_name), args.enable_force_include_usage,
                             args.return_tokens_as_token_ids, args.max_logprobs)
    if profile_for is not None:
        profile = profile_for(profile)
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

    from conductor.memory.settings import MemorySettings
    from conductor.memory.types import UserNameError, user_folder

    settings = MemorySettings()
    # The engine's own user by name, any name a request may give (josé too): each
    # request maps it to its folder (server/turn/memory.py); one that is no one's is
    # refused now, not with a 400 on every request.
    user_name = (settings.user_name if args.user is None else args.user).lower()
    try:
        own_folder = user_folder(user_name)
    except UserNameError as exc:
        given = "$TANDEM_USER" if args.user is None else "--user"
        raise ProfileError(f"{given} {user_name!r}: {exc}") from None
    settings = MemorySettings(
        user_name=user_name,
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

    load_failed: list[str] = []

    def exit_for_load_failure(reason: str) -> None:
        load_failed.append(reason)
        print(f"tandem: the engine failed to load: {reason}", file=sys.stderr, flush=True)
        server.should_exit = True

    browser = BrowserPolicy(listen_host=host,
                            allowed_hosts=frozenset(h.lower() for h in args.allowed_host),
                            allowed_origins=frozenset(o.lower().rstrip("/")
                                                      for o in args.allowed_origin))
    engine = engine_for(profile) if engine_for is not None else None
    app = create_app(profile, tandem_home(), engine=engine, progress=_say, on_ready=ready,
                     memory_settings=settings, auth=auth, on_engine_dead=exit_for_restart,
                     browser=browser, root_path=args.root_path or "",
                     writer_policy=writer_policy, on_load_failed=exit_for_load_failure)
    server = uvicorn.Server(server_config(app, args.host, args.port, uds=args.uds))
    from server.http import access_log

    access_log.configure(enabled=not args.disable_access_log)
    from server.mcp.discovery import announced, local_url

    # $TANDEM_HOME/server.json while serving: `tandem mcp` forwards its calls here. Its
    # user is the folder, as `tandem mcp --user` resolves its own to compare the two.
    with announced(tandem_home(), local_url(args.host, args.port), own_folder,
                   uds=args.uds):
        if listener is None:
            server.run()
        else:
            server.run(sockets=[listener])
    if engine_died:
        _say(f"the engine core process stopped; exiting with {ENGINE_DEAD_EXIT} so a "
             "supervisor restarts the server")
        _exit_now(ENGINE_DEAD_EXIT)
    if load_failed:
        print(f"tandem: exiting with {ENGINE_LOAD_FAILED_EXIT}: the engine failed to load "
              "(the reason is above)", file=sys.stderr)
        _exit_now(ENGINE_LOAD_FAILED_EXIT)
    return 0


def _exit_now(status: int) -> None:
    """The app has shut down (the ledger saved, files closed). A normal exit would then
    spend 3-7 s finalising torch, vLLM and tokenizer threads before the supervisor can
    restart us: leave at once."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


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


