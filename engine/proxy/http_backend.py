"""An engine over HTTP: `EngineBackend` on another server's `/v1/completions`, prompts as
token ids (proxy mode).

The memory path hands an engine the prompt's exact ids; a backend that takes token ids
(vLLM's OpenAI server, llama.cpp's `llama-server`) reads exactly those, so the ids a turn
replays are the ids its prefix cache holds, as in-process. Each generation is one streamed
completions request; the backend's kind (`dialects.py`) says how the answer's ids and
log-probabilities come back and which extensions it takes. The usage chunk gives the
prompt's size and the backend's cached tokens.

What cannot cross the wire is said where it goes: the tool-call ban becomes a logit bias
on the tool-call token, and background work gives way to a client by having its stream
closed before a client request is sent (no scheduler of ours runs there).

A backend that keeps no prefix cache a user (`Dialect.salts_cache`: llama.cpp, a plain
OpenAI API) serves one user, the first whose request is sent: how much of a prompt it had
cached (in the usage, or in the time to the first token) would tell one user what another
sent. Another user's request is refused, with the reason, unless the operator said the
cache may be shared (`tandem proxy --shared-backend-cache`); their background work is not
sent.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.backend import BackendFailed, RequestRejected
from engine.engine import served_fingerprint
from engine.generation import Delta, GenerationParams, TokenLogprob, close_timings
from engine.profiles import Profile
from engine.proxy.chat_wire import ChatDialect
from engine.proxy.dialects import DIALECTS, Dialect, TokenReader
from engine.request_kind import RequestKind
from engine.special_tokens import SpecialTokens, special_tokens
from engine.stats import EngineStats, RequestTimings

CONNECT_TIMEOUT_S = 5.0
HEALTH_FAILURES_DEAD = 3  # health checks failed in a row before the backend counts as down
YIELD_WAIT_S = 2.0  # the most a client request waits for background streams to close
ONE_USER_REFUSAL = ("this server serves one user on its backend ({kind}), which keeps one "
                    "prefix cache for all users (what one user sent would show in how much "
                    "of another's prompt is cached); its operator can share it among users "
                    "with `tandem proxy --shared-backend-cache`")


@dataclass
class _Running:
    kind: RequestKind
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # asked to stop
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # its stream is closed


class HttpEngine:
    """`EngineBackend` over an OpenAI-compatible server that takes token-id prompts."""

    reuse_block: int | None = None  # the backend's cache layout is its own: laid out as dense

    def __init__(self, profile: Profile, tokenizer, base_url: str, model: str,
                 api_key: str | None = None, scripted_kernels: bool = False,
                 timeout_s: float = 600.0, kind: str = "vllm", wire: str = "completions",
                 shared_cache: bool = False) -> None:
        self.profile = profile
        self.tokenizer = tokenizer
        self.tokens: SpecialTokens = special_tokens(tokenizer, profile.tool_call_format)
        self.fingerprint = served_fingerprint(f"{base_url}|{model}", tokenizer)
        self.stats = EngineStats()
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.kind = kind
        self.dialect: Dialect = DIALECTS[kind](model, self.tokens, tokenizer,
                                               scripted_kernels=scripted_kernels)
        # A plain OpenAI API takes no grammar: the background writer goes without one.
        self.takes_grammar = not self.dialect.plain
        if wire == "chat":  # messages rendered by the backend's own template
            self.dialect = ChatDialect(self.dialect)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S))
        self._running: dict[str, _Running] = {}
        # The index lists the same notes request after request: their lines are counted once.
        self.count_tokens: Callable[[str], int] = functools.lru_cache(maxsize=4096)(
            self._count_tokens)
        self._health_failures = 0
        # One user's cache salt, where the backend keeps no cache a user (module docstring)
        self.one_user = not (self.dialect.salts_cache or shared_cache)
        self._served_salt: str | None = None

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    # -- the seam ------------------------------------------------------------------------
    async def generate(self, prompt_token_ids: list[int], params: GenerationParams,
                       kind: RequestKind = "client",
                       request_id: str | None = None) -> AsyncIterator[Delta]:
        request_id = request_id or f"{kind}-{uuid.uuid4().hex}"
        another_user = not self._serves(params.cache_salt, kind)
        if another_user and kind == "client":
            raise RequestRejected(ONE_USER_REFUSAL.format(kind=self.kind))
        body = self.completion_body(prompt_token_ids, params, kind)
        if kind == "background" and (another_user or self.running("client")):
            # background work never starts beside a client, nor for a user the backend
            # does not serve (nothing was sent: no usage)
            self.stats.background_yields["refused_another_user" if another_user
                                         else "refused_beside_client"] += 1
            yield Delta(request_id, "", [], finish_reason="abort", finished=True,
                        prompt_tokens=0)
            return
        timings = RequestTimings(kind=kind, prompt_tokens=len(prompt_token_ids),
                                 request_id=request_id)
        # Registered before a client waits for background streams to close: background
        # work that would start meanwhile sees the client and does not.
        running = _Running(kind)
        self._running[request_id] = running
        self.stats.started(kind)
        finished = False
        try:
            if kind == "client":
                await self._background_gives_way()
            async for delta in self._stream(body, request_id, len(prompt_token_ids), running,
                                            params):
                timings.tokens(len(delta.token_ids))
                if delta.finished:
                    finished = True
                    close_timings(delta, timings, self.stats)
                yield delta
        finally:
            self._running.pop(request_id, None)
            running.ended.set()
            if not finished:
                self.stats.aborted(kind)

    def _serves(self, salt: str | None, kind: RequestKind) -> bool:
        """Whether a request under `salt` may go to the backend: always where it keeps a
        cache a user; else when it is the served user's (the first client's to be sent;
        a request with no salt names nobody)."""
        if not self.one_user or salt is None or salt == self._served_salt:
            return True
        if self._served_salt is None and kind == "client":
            self._served_salt = salt
            return True
        return False

    async def _background_gives_way(self) -> None:
        """Close every background stream and wait until they are closed, so the backend
        never holds background work beside a client's request (no scheduler of ours runs
        there to put the client first)."""
        background = [r for r in self._running.values() if r.kind == "background"]
        if background:
            for running in background:
                running.closed.set()
            self.stats.background_yields["closed_for_client"] += len(background)
            waits = [asyncio.ensure_future(r.ended.wait()) for r in background]
            _, pending = await asyncio.wait(waits, timeout=YIELD_WAIT_S)
            for wait in pending:
                wait.cancel()
        # Measured as the client's request goes out, not assumed: background streams still
        # open now (a consumer that does not read its stream) are beside it.
        still_open = sum(1 for r in self._running.values()
                         if r.kind == "background" and not r.ended.is_set())
        if still_open:
            self.stats.background_yields["client_beside_background"] += still_open

    async def _stream(self, body: dict, request_id: str, prompt_tokens: int,
                      running: _Running, params: GenerationParams) -> AsyncIterator[Delta]:
        began = False  # the backend answered: a transport error now is a cut stream
        try:
            async with self._client.stream("POST", self.dialect.path, json=body) as response:
                began = True
                if response.status_code >= 400:
                    await response.aread()
                    raise _refusal(response)
                last: Delta | None = None
                reader = self.dialect.reader(params)
                async for event in _events(response, running):
                    usage = event.get("usage")
                    if event.get("choices"):
                        if last is not None:
                            yield last
                        last = self._delta(reader, event["choices"][0], request_id,
                                           prompt_tokens, params)
                    if usage and last is not None:  # the last event: the totals
                        details = usage.get("prompt_tokens_details") or {}
                        last.prompt_tokens = usage.get("prompt_tokens", prompt_tokens)
                        last.cached_tokens = details.get("cached_tokens") or 0
                if running.closed.is_set():
                    # closed by the server (a client came, an abort): ended as vLLM's
                    # scheduler ends a preempted request, so callers see "abort"
                    ended = last or Delta(request_id, "", [], prompt_tokens=prompt_tokens)
                    ended.finished, ended.finish_reason = True, "abort"
                    yield ended
                    return
                if last is None or last.finish_reason is None:
                    raise BackendFailed("the backend's stream was cut before the answer "
                                        "ended")
                last.finished = True
                yield last
        except httpx.TimeoutException:
            raise BackendFailed("the backend did not answer in time", 504) from None
        except httpx.TransportError as error:
            if began:
                raise BackendFailed(f"the backend's stream was cut: {error}") from None
            raise BackendFailed(f"the backend cannot be reached: {error}") from None

    def _delta(self, reader: TokenReader, choice: dict, request_id: str, prompt_tokens: int,
               params: GenerationParams) -> Delta:
        text, ids, steps = reader.read(choice)
        return Delta(request_id=request_id, text=text, token_ids=ids,
                     finish_reason=choice.get("finish_reason"),
                     stop_reason=choice.get("stop_reason"), prompt_tokens=prompt_tokens,
                     logprobs=steps if params.logprob_token_ids else [],
                     token_logprobs=self._token_logprobs(ids, steps)
                     if params.top_logprobs is not None else [])

    def _token_logprobs(self, ids: list[int], steps: list[dict[int, float]]
                        ) -> list[TokenLogprob]:
        out = []
        for token, step in zip(ids, steps, strict=False):
            top = sorted(step.items(), key=lambda item: -item[1])
            out.append(TokenLogprob(token, self.tokenizer.decode([token]),
                                    step.get(token, 0.0),
                                    tuple((t, self.tokenizer.decode([t]), lp) for t, lp in top)))
        return out

    def completion_body(self, ids: list[int], params: GenerationParams,
                        kind: RequestKind) -> dict[str, Any]:
        """The completions request for one generation, in the backend's dialect."""
        return self.dialect.body(ids, params, kind)

    async def abort(self, request_id: str) -> None:
        running = self._running.get(request_id)
        if running is not None:
            running.closed.set()

    @property
    def dead(self) -> bool:
        """The backend failed its last health checks (the server answers 503 meanwhile)."""
        return self._health_failures >= HEALTH_FAILURES_DEAD

    def running(self, kind: RequestKind | None = None) -> list[str]:
        return [rid for rid, r in self._running.items() if kind is None or r.kind == kind]

    # -- health --------------------------------------------------------------------------
    async def check_health(self) -> bool:
        """One look at the backend (`/health`, else `/v1/models`): `dead` follows it."""
        for path in ("/health", "/v1/models"):
            try:
                response = await self._client.get(path, timeout=CONNECT_TIMEOUT_S)
            except httpx.HTTPError:
                continue
            if response.status_code < 500 and response.status_code != 404:
                self._health_failures = 0
                return True
        self._health_failures += 1
        return False

    async def close(self) -> None:
        await self._client.aclose()


async def _events(response: httpx.Response, running: _Running) -> AsyncIterator[dict]:
    """The SSE events of a completions stream, until `[DONE]` or until `running` is
    closed (the stream is then dropped: the backend aborts the request)."""
    lines = response.aiter_lines()
    closed = asyncio.ensure_future(running.closed.wait())
    next_line: asyncio.Future | None = None
    try:
        while True:
            next_line = asyncio.ensure_future(anext(lines))
            await asyncio.wait({next_line, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not next_line.done():
                next_line.cancel()
                return
            try:
                line = next_line.result()
            except StopAsyncIteration:
                return
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                event = json.loads(data)
            except ValueError:
                raise BackendFailed("the backend sent an event that is not JSON") from None
            if not isinstance(event, dict):
                raise BackendFailed("the backend sent an event that is not an object")
            if "error" in event:
                raise BackendFailed(f"the backend failed the answer: {_message(event)}")
            yield event
    finally:  # a consumer cancelled mid-wait leaves no read of the stream behind
        closed.cancel()
        if next_line is not None and not next_line.done():
            next_line.cancel()


def _refusal(response: httpx.Response) -> Exception:
    try:
        message = _message(response.json())
    except ValueError:
        message = response.text[:300]
    if 400 <= response.status_code < 500:
        return RequestRejected(f"the backend refused the request: {message}")
    return BackendFailed(f"the backend answered {response.status_code}: {message}")


def _message(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(body.get("message") if isinstance(body, dict) else body)[:300]
