"""The FastAPI app: OpenAI routes, health and readiness, metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse

from conductor.memory.hiding import NotesShown, PrefetchLimits
from conductor.memory.services import MemoryServices
from conductor.memory.settings import MemorySettings
from conductor.memory.types import nightly_loop
from engine.engine import Engine, EngineDead
from engine.profiles import Profile
from server.access.admin import AdminGate
from server.access.admin_password import AdminPassword
from server.access.auth import Auth
from server.access.browser_guard import BrowserGuard, BrowserPolicy
from server.access.key_check import KeyCheckAndCount
from server.access.keys import KeyStore
from server.http.access_log import AccessLog, count_generation
from server.http.disconnect import QuietDisconnects
from server.http.errors import (
    APIError,
    engine_dead_error,
    install_error_handlers,
)
from server.http.load_tracking import ServerLoad, TrackServerLoad
from server.http.metrics import HTTPCounters, TandemMetrics, render_metrics
from server.http.orca import OrcaLoadReport
from server.idle.jobs import JobService
from server.idle.prefetch import PrefetchService
from server.idle.prewarm import PrewarmService
from server.idle.record_prefill import RecordPrefillService
from server.idle.search import SearchService
from server.idle.writer import WriterService
from server.idle.writer_budget import WriterPolicy
from server.mcp.http import mount_mcp
from server.routes.chat import answerer, chat_router
from server.routes.chat_batch import chat_batch_router
from server.routes.completions import completions_router
from server.routes.conductor import conductor_router
from server.routes.context_view import context_router
from server.routes.jobs import job_router
from server.routes.layers import layer_router
from server.routes.memory import memory_router
from server.routes.memory_admin import memory_admin_router
from server.routes.messages import messages_router
from server.routes.notes_admin import notes_admin_router
from server.routes.responses import responses_router
from server.routes.screen import screen_router
from server.routes.vllm import vllm_router
from server.turn.answering.engine_tools import EngineToolbox
from server.turn.tool_exchange import TemplateCannotExchange, check_tool_exchange

log = logging.getLogger("tandem.server")


@dataclass
class ServerState:
    profile: Profile
    home: Path
    memory: MemoryServices
    admin: AdminGate
    engine: Engine | None = None
    load_error: str | None = None
    writer_policy: WriterPolicy | None = None  # proxy mode on a paid backend
    writer: WriterService | None = None
    prewarm: PrewarmService | None = None
    record_prefill: RecordPrefillService | None = None
    prefetch: PrefetchService | None = None
    jobs: JobService | None = None
    search: SearchService | None = None
    tools: EngineToolbox | None = None
    http: HTTPCounters = field(default_factory=HTTPCounters)
    load: ServerLoad = field(default_factory=ServerLoad)  # generation requests in flight
    metrics: TandemMetrics = field(default_factory=TandemMetrics)
    started_at: float = field(default_factory=time.time)

    def engine_ready(self, engine: Engine) -> None:
        if self.profile.tool_call_format == "qwen":
            _check_template(self.profile, engine)
        # A hybrid model's record, prefilled after each answer (none on a dense engine or
        # a proxy's backend: their reuse_block is None, and nothing is queued)
        dropped = self.memory.serve_model(engine.fingerprint,
                                          hybrid=engine.reuse_block is not None)
        if dropped:
            log.info("ledger: %d saved records were made under another model, tokenizer or "
                     "chat template; their conversations are rendered afresh once", dropped)
        # the heads the saved records ran: prewarmed in the first idle moment (counts only)
        seeded = self.memory.seed_prewarm(self.profile.memory.mode)
        if seeded:
            log.info("prewarm: %d heads from the saved sessions", seeded)
        self.engine = engine
        self.memory.use_tokenizer(engine.count_tokens, engine.tokenizer.decode)
        engine.stats.observers.append(self.metrics.request_finished)
        if count_generation not in engine.stats.observers:  # the access log's tokens, once
            engine.stats.observers.append(count_generation)
        self.memory.metrics = self.metrics
        door = self.load  # each starts nothing while a client is at the door or in the engine
        self.writer = WriterService(self.memory, engine, self.profile.memory.writer_mode,
                                    self.writer_policy, door=door)
        self.prewarm = PrewarmService(self.memory, engine, door)
        self.record_prefill = RecordPrefillService(self.memory, engine, door)
        self.prefetch = PrefetchService(self.memory, engine, door)
        self.jobs = JobService(self.memory, engine, self.profile, door=door)
        self.search = SearchService(self.memory, engine,
                                    qdrant_url=self.profile.memory.qdrant_url,
                                    endpoint=self.profile.memory.search_embedder,
                                    allowed_roots=self.profile.memory.allowed_roots, door=door)
        self.memory.on_change = self.search.mark_stale
        self.tools = EngineToolbox(self.memory, self.search, engine.tokenizer)

    @property
    def engine_dead(self) -> bool:
        return self.engine is not None and self.engine.dead

    @property
    def over_http(self) -> bool:
        """Proxy mode: the engine is a backend over HTTP, which goes down and comes back."""
        return hasattr(self.engine, "check_health")

    def ready_engine(self) -> Engine:
        if self.engine_dead and self.over_http:
            raise APIError(503, "the backend does not answer its health checks",
                           code="backend_unreachable", kind="server_error")
        if self.engine_dead:
            raise engine_dead_error()
        if self.engine is None:
            raise APIError(503, "the engine is still loading" if self.load_error is None
                           else f"the engine failed to load: {self.load_error}",
                           code="engine_not_ready", kind="server_error")
        return self.engine


def _check_template(profile: Profile, engine: Engine) -> None:
    """Refuse a chat template that cannot hold a tool exchange at start, with the profile
    named, rather than fail mid-answer when the model calls a memory tool."""
    try:
        check_tool_exchange(engine.tokenizer)
    except TemplateCannotExchange as exc:
        raise TemplateCannotExchange(
            f"profile {profile.name!r}: {exc}, so tool calls (the client's forced ones and "
            "memory's own tools) cannot run; set tool_call_format: none in the profile to "
            "serve this model without tool calls") from None


def create_app(profile: Profile, home: Path, engine: Engine | None = None,
               progress: Callable[[str], None] = log.info,
               on_ready: Callable[[], None] | None = None,
               memory_settings: MemorySettings | None = None,
               auth: Auth | None = None,
               on_engine_dead: Callable[[], None] | None = None,
               browser: BrowserPolicy | None = None, root_path: str = "",
               writer_policy: WriterPolicy | None = None,
               on_load_failed: Callable[[str], None] | None = None) -> FastAPI:
    """The app; without an engine it starts one from the profile in the background.
    `auth` defaults to the named keys under `home` (none: auth off). `on_engine_dead` is
    called once if the engine core process dies (`tandem serve` then exits non-zero), and
    `on_load_failed(reason)` if the engine cannot load (`tandem serve` exits too; without
    it the app stays up, /readyz saying why).
    `root_path`: a proxy's path prefix, as vLLM's --root-path (both paths answer).
    `browser`: the host names the server answers as and the web origins it lets in
    (default: loopback names and addresses, no web origin). `writer_policy`: the
    writer's price and limits on a paid backend (proxy mode)."""
    browser = browser or BrowserPolicy()
    memory = MemoryServices(home, memory_settings or MemorySettings(),
                            ledger_max_tokens=profile.memory.ledger_max_tokens,
                            notes_shown=NotesShown.of(profile.memory.notes_shown),
                            prefetch_limits=_prefetch_limits(profile),
                            command_recogniser=profile.memory.command_recogniser)
    memory.responses.max_bytes = profile.memory.responses_store_mib * 1024 * 1024
    memory.idle.prewarm.notes = profile.memory.prewarm_notes  # likely notes a head branches
    auth = auth or Auth(keys=KeyStore(home))
    auth.engine_user = memory.settings.user_name
    state = ServerState(profile=profile, home=home, memory=memory,
                        admin=AdminGate(AdminPassword(home), memory.settings),
                        writer_policy=writer_policy)
    if engine is not None:
        state.engine_ready(engine)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        # after a crash: temp files of the dead process go, torn journal lines are counted
        await asyncio.to_thread(memory.recover)
        # background work: the saver waits while clients run
        saver = asyncio.create_task(memory.keep_saved(
            busy=lambda: state.load.in_flight > 0
            or bool(state.engine and state.engine.running("client"))))
        loader = None
        if state.engine is None:
            loader = asyncio.create_task(_load_engine(state, progress, on_ready,
                                                      on_load_failed))
        else:  # an engine given (proxy mode's backend): loaded now
            freeze_loaded_heap()
            if on_ready is not None:
                on_ready()
        background = asyncio.create_task(_run_background_when_ready(state))
        nightly = asyncio.create_task(nightly_loop(memory.root, memory.settings.nightly_hour))
        if memory.leases is not None:  # replicas: renew the leases of the users served
            memory.leases.start()
        watchdog = asyncio.create_task(_watch_engine(state, on_engine_dead))
        try:
            yield
        finally:
            watchdog.cancel()
            background.cancel()
            nightly.cancel()
            if loader is not None and not loader.done():
                loader.cancel()
            if engine is None and state.engine is not None:
                state.engine.shutdown()
            elif state.over_http:  # proxy mode: the backend's connections
                await state.engine.close()
            saver.cancel()
            memory.save_now()  # the last records
            if memory.leases is not None:  # the users' next replica writes at once
                await asyncio.to_thread(memory.leases.close)

    app = FastAPI(title="Tandem", lifespan=lifespan, root_path=root_path)
    app.state.tandem = state
    install_error_handlers(app)
    app.include_router(memory_router(memory, lambda: state.search))
    app.include_router(conductor_router(state))
    app.include_router(job_router(state))
    app.include_router(notes_admin_router(state))
    app.include_router(memory_admin_router(state))
    app.include_router(context_router(state))
    app.include_router(screen_router(state))
    app.include_router(completions_router(state))
    load = state.load  # vLLM's /load: generation requests in flight
    app.include_router(vllm_router(state, load))

    answer = answerer(state)
    app.include_router(chat_router(state, answer))
    app.include_router(chat_batch_router(state))
    app.include_router(responses_router(state))
    app.include_router(messages_router(state))  # Anthropic's wire (Claude Code)
    app.include_router(layer_router(state, answer))
    mount_mcp(app, memory, lambda: state.search)  # /mcp: the memory tools over MCP

    # inside the key check: a refused request is neither counted nor reported on
    app.add_middleware(OrcaLoadReport)
    app.add_middleware(TrackServerLoad, load=load)
    app.add_middleware(KeyCheckAndCount, auth=auth, counters=state.http, admin=state.admin)
    if browser.allowed_origins:  # CORS for the origins the operator named, and only them
        app.add_middleware(CORSMiddleware, allow_origins=sorted(browser.allowed_origins),
                           allow_methods=["*"], allow_headers=["*"],
                           expose_headers=["X-Tandem-Memory-Token"])
    app.add_middleware(BrowserGuard, policy=browser)  # before any other work
    app.add_middleware(QuietDisconnects)  # a client gone mid-body: no 500, no traceback
    app.add_middleware(AccessLog)  # outermost: times every request, refusals included

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        if state.engine_dead and state.over_http:
            return JSONResponse({"status": "backend_down", "profile": profile.name},
                                status_code=503)
        if state.engine_dead:
            return JSONResponse({"status": "engine_dead",
                                 "error": engine_dead_error().message}, status_code=503)
        if state.engine is not None:
            return JSONResponse({"status": "ready", "profile": profile.name})
        status = "failed" if state.load_error else "loading"
        return JSONResponse({"status": status, "error": state.load_error}, status_code=503)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        stats = state.engine.stats if state.engine else None
        return PlainTextResponse(render_metrics(stats, state.http, state.engine is not None,
                                                state.metrics),
                                 media_type="text/plain; version=0.0.4")

    return app


LOADING_TICK_S = 5.0
BACKGROUND_CHECK_S = 1.0
ENGINE_CHECK_S = 0.25
BACKEND_CHECK_S = 2.0


async def _watch_engine(state: ServerState, on_dead: Callable[[], None] | None) -> None:
    """Notice at once when the engine core process dies (an out-of-memory kill): vLLM's
    monitor thread marks it, nothing else tells the server. From then /readyz and every
    request answer 503, and the server is told to exit so a supervisor restarts it.
    A backend over HTTP is looked at every `BACKEND_CHECK_S` instead: /readyz follows its
    health, and the server waits for it to come back."""
    while True:
        if getattr(state, "over_http", False):
            await state.engine.check_health()
            await asyncio.sleep(BACKEND_CHECK_S)
        elif state.engine_dead:
            break
        else:
            await asyncio.sleep(ENGINE_CHECK_S)
    log.error("the engine core process stopped: answering 503 and exiting")
    if on_dead is not None:
        on_dead()


def _prefetch_limits(profile: Profile) -> PrefetchLimits:
    """The profile's prefetch settings; no hints where memory does not read (shadow or
    off): a hint's notes would reach the model."""
    limits = PrefetchLimits(**dict(profile.memory.prefetch))
    return limits if profile.memory.mode == "on" else dataclasses.replace(limits,
                                                                          hint_notes=0)


async def _run_background_when_ready(state: ServerState) -> None:
    """The idle loop of background turns, one at a time, from the moment the engine is
    ready: prewarms, a hybrid model's record prefills and prefetches first (cheap, and
    they make the next turn fast), then the writer, then the cognition jobs, then the
    search index's sync."""
    while state.writer is None or state.prewarm is None or state.jobs is None \
            or state.search is None or state.record_prefill is None:
        await asyncio.sleep(0.5)
    while not state.engine_dead or state.over_http:
        await asyncio.sleep(BACKGROUND_CHECK_S)
        if state.engine_dead:  # a backend that is down: its work waits for it
            continue
        for service in (state.prewarm, state.record_prefill, state.prefetch, state.writer,
                        state.jobs, state.search):
            try:
                await service.tick()
            except EngineDead:  # the watchdog says it once
                return
            except Exception:  # a failed run must not stop the loop; ids only in the log
                log.exception("%s run failed", service.name)


async def _tick_while_loading(progress: Callable[[str], None], started: float) -> None:
    while True:
        await asyncio.sleep(LOADING_TICK_S)
        progress(f"loading engine... {time.monotonic() - started:.0f} s")


async def _load_engine(state: ServerState, progress: Callable[[str], None],
                       on_ready: Callable[[], None] | None,
                       on_failed: Callable[[str], None] | None = None) -> None:
    started = time.monotonic()
    progress(f"loading engine: profile {state.profile.name}, model {state.profile.model}")
    ticker = asyncio.create_task(_tick_while_loading(progress, started))
    try:
        engine = await Engine.start(state.profile, state.home, progress)
        try:
            state.engine_ready(engine)
        except Exception:  # refused (a template that cannot hold a tool exchange)
            engine.shutdown()
            raise
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # shown on /readyz and in the log, never as a traceback to clients
        state.load_error = _load_failure(exc)
        progress(f"engine failed to load: {state.load_error}")
        if on_failed is not None:
            on_failed(state.load_error)
        return
    finally:
        ticker.cancel()
    freeze_loaded_heap()
    if on_ready is not None:
        on_ready()


def freeze_loaded_heap() -> int:
    """Once the server has loaded (the ledger's records, the engine), the objects it holds
    for good leave the collector's walk: a full collection of a 100,000-record ledger (1.6M
    objects) took 240-340 ms of GIL under load (bench/README: issue 58, item 4). The
    garbage is collected first, so that none of it is frozen. Returns the frozen count."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _load_failure(exc: Exception) -> str:
    """Why the engine did not load, in a line: vLLM's config checks are pydantic's, whose
    text adds a dump of every engine argument and a link to each message."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return "; ".join(str(error["msg"]) for error in errors())
        except (TypeError, KeyError):
            pass
    return f"{type(exc).__name__}: {exc}"
