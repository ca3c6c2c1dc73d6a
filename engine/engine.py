"""engine.Engine: vLLM's AsyncLLM started from a profile, fed token ids, streaming deltas."""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.backend import EngineDead, RequestRejected
from engine.generation import (
    Delta,
    GenerationParams,
    close_timings,
    prompt_logprobs,
    structured_outputs,
    token_logprobs,
)
from engine.generation import TokenLogprob as TokenLogprob  # callers import it from here
from engine.model_builder import ensure_model
from engine.profiles import Profile
from engine.request_kind import (
    BACKGROUND_PRIORITY,
    CLIENT_PRIORITY,
    DEFERRED_PRIORITY,
    KIND_KEY,
    RequestKind,
)
from engine.special_tokens import SpecialTokens, special_tokens
from engine.stats import EngineStats, RequestTimings

SCHEDULER_CLS = "engine.scheduler.ConductorScheduler"


@dataclass
class _Running:
    kind: RequestKind
    started: float = field(default_factory=time.perf_counter)


def load_tokenizer(name_or_path: str):
    """The Hugging Face tokenizer (and chat template) the server renders prompts with."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path)


def served_fingerprint(model: str, tokenizer) -> str:
    """A hash of what token ids mean to this server: the model, the tokenizer's vocabulary
    and the chat template that renders prompts. Ids recorded under another fingerprint
    (a restart on another profile) must not be replayed."""
    digest = hashlib.sha256()
    digest.update(model.encode())
    digest.update(type(tokenizer).__name__.encode())
    digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    digest.update((getattr(tokenizer, "chat_template", None) or "").encode())
    return digest.hexdigest()[:32]


def resolve_model_path(profile: Profile, home: Path, progress: Callable[[str], None]) -> str:
    """The model's path or hub id; builds the embedded model when the profile names one."""
    if profile.builtin_model:
        return str(ensure_model(home, profile.builtin_model, progress))
    return profile.model


def aligned_cache(profile: Profile) -> bool:
    """A hybrid model whose prefix cache keeps its recurrent state at block boundaries."""
    return profile.mamba_cache_mode == "align"


def reuse_block(profile: Profile, llm) -> int | None:
    """The block size a hybrid model in align mode reuses prefixes by, as vLLM set it
    (raised from the profile's so that a block's pages hold one recurrent state); None for
    a dense model, whose every whole KV block is reusable."""
    if not aligned_cache(profile):
        return None
    config = getattr(llm, "vllm_config", None)
    return config.cache_config.block_size if config is not None else profile.block_size


async def _alive(stream):
    """vLLM's stream, with its EngineDeadError as ours (the server's callers know no vLLM),
    and a request vLLM refuses before its first output (a grammar its backend cannot
    compile, say) as RequestRejected."""
    from vllm.exceptions import VLLMClientError  # not a ValueError
    from vllm.v1.engine.exceptions import EngineDeadError

    started = False
    try:
        async for out in stream:
            started = True
            yield out
    except EngineDeadError:
        raise EngineDead() from None
    except (ValueError, RuntimeError, OverflowError, VLLMClientError) as error:
        # OverflowError: a number past int64, refused as the request is sent to the core
        if started or isinstance(error, EngineDead):
            raise
        raise RequestRejected(str(error)) from None


def _sampling(sampling_params: type, **fields):
    """vLLM's SamplingParams, its own refusal of a value (an empty stop string, a
    min_tokens past max_tokens) as RequestRejected: a 400, not a 500, for whatever the
    request schemas let through."""
    from vllm.exceptions import VLLMClientError

    try:
        return sampling_params(**fields)
    except (ValueError, TypeError, VLLMClientError) as error:
        raise RequestRejected(str(error)) from None


class Engine:
    """The one vLLM engine of this process. Create with `await Engine.start(...)`."""

    def __init__(self, profile: Profile, llm, model_path: str, tokenizer=None) -> None:
        self.profile = profile
        self.model_path = model_path
        self._llm = llm
        self.tokenizer = tokenizer or load_tokenizer(profile.tokenizer or model_path)
        self.tokens: SpecialTokens = special_tokens(self.tokenizer, profile.tool_call_format)
        self.fingerprint = served_fingerprint(profile.model, self.tokenizer)
        self.stats = EngineStats()
        self.reuse_block = reuse_block(profile, llm)
        self._running: dict[str, _Running] = {}
        # Memoised: tail notes price the same note texts against their budgets every turn.
        self.count_tokens: Callable[[str], int] = functools.lru_cache(maxsize=4096)(
            self._count_tokens)

    def rendering_for(self, profile: Profile, model_path: str) -> Engine:
        """This engine's vLLM for a server that renders prompts with another profile's
        tokenizer and chat template over the same weights (the test models that carry the
        published templates share the tiny model's weights, so one engine serves them
        all). Requests, statistics and the dead-engine state are shared."""
        twin = copy.copy(self)
        twin.profile, twin.model_path = profile, model_path
        twin.tokenizer = load_tokenizer(profile.tokenizer or model_path)
        twin.tokens = special_tokens(twin.tokenizer, profile.tool_call_format)
        twin.fingerprint = served_fingerprint(profile.model, twin.tokenizer)
        twin.count_tokens = functools.lru_cache(maxsize=4096)(twin._count_tokens)
        return twin

    def _count_tokens(self, text: str) -> int:
        """Tokens in `text` as a prompt would hold it (no special tokens added)."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    @classmethod
    async def start(cls, profile: Profile, home: Path,
                    progress: Callable[[str], None] = print) -> Engine:
        from vllm.config import ReasoningConfig, StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        import kernels

        model_path = resolve_model_path(profile, home, progress)
        # A model with <think> tokens gets vLLM's reasoning config: a request's
        # thinking_token_budget forces </think> once the budget is spent.
        tokenizer = load_tokenizer(profile.tokenizer or model_path)
        thinks = special_tokens(tokenizer, profile.tool_call_format).think is not None
        if profile.device == "cpu" and profile.cpu_kv_space_gib:
            # vLLM's CPU backend reads its KV-cache size (GiB) from the environment; the
            # spawned engine-core process inherits it.
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(profile.cpu_kv_space_gib)
        if profile.device == "cpu" and profile.cpu_reserved_cores is not None:
            # By default vLLM keeps one core free of its worker's threads; on a 2-core
            # machine that halves prefill (measured: 60 -> 104 tok/s with none kept free).
            os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(profile.cpu_reserved_cores)
        args = AsyncEngineArgs(
            model=model_path,
            tokenizer=profile.tokenizer or model_path,
            dtype=profile.dtype,
            max_model_len=profile.max_model_len,
            block_size=profile.block_size,
            tensor_parallel_size=profile.tensor_parallel_size,
            enforce_eager=profile.enforce_eager,
            load_format=profile.load_format,
            max_num_seqs=profile.max_num_seqs,
            max_logprobs=profile.max_logprobs,
            enable_prefix_caching=True,
            # vLLM's CPU sampler cannot rewind a seeded generator after a partial prefill
            # chunk ("CPU Generator does not use offset" kills the engine), so the CPU
            # engine prefills each prompt whole; but a hybrid model's "align" prefix cache
            # needs chunked prefill (its recurrent state is kept where a chunk ends on a
            # block boundary), so there seeded requests are refused (generate).
            **({"enable_chunked_prefill": aligned_cache(profile),
                "max_num_batched_tokens": profile.max_model_len}
               if profile.device == "cpu" else {}),
            **({"mamba_cache_mode": "align"} if aligned_cache(profile) else {}),
            scheduling_policy="priority",
            scheduler_cls=SCHEDULER_CLS,
            async_scheduling=False,
            logits_processors=list(kernels.ALL),
            # Log-probabilities as the sampler saw them (after the scripted driver, the
            # tool-call ban and the grammar): the writer's gate reads its answer's odds.
            logprobs_mode="processed_logprobs",
            # Compact JSON: with any whitespace allowed, a weak model can write blank
            # space until max_tokens and never close the object.
            structured_outputs_config=StructuredOutputsConfig(backend="xgrammar",
                                                              disable_any_whitespace=True),
            reasoning_config=ReasoningConfig(reasoning_start_str="<think>",
                                             reasoning_end_str="</think>") if thinks else None,
            # vLLM's own metrics (vllm:num_requests_running, vllm:kv_cache_usage_perc,
            # prefix-cache hits, TTFT and inter-token histograms) for /metrics, which a vLLM
            # dashboard reads; its periodic log line stays off below INFO.
            disable_log_stats=False,
            **({"gpu_memory_utilization": profile.gpu_memory_utilization}
               if profile.gpu_memory_utilization is not None else {}),
        )
        llm = AsyncLLM.from_engine_args(args)
        engine = cls(profile, llm, model_path, tokenizer)
        progress("warming up the engine")
        await engine._warm_up()
        return engine

    async def _warm_up(self) -> None:
        """One throwaway request down the paths vLLM sets up on first use: a grammar
        (xgrammar) and chosen log-probabilities. Measured on the tiny model: the first
        such request took 5.7 s, 1.7 s of it blocking this process's event loop; the
        writer's gate is that request, and whoever ran beside it would have waited."""
        ids = self.tokenizer.encode("yes or no?", add_special_tokens=False)
        yes, no = (self.tokenizer.encode(w, add_special_tokens=False)[0] for w in ("yes", "no"))
        params = GenerationParams(max_tokens=2, temperature=0.0, choices=("yes", "no"),
                                  logprob_token_ids=(yes, no))
        async for _ in self.generate(ids, params):
            pass
        self.stats = EngineStats()  # the warm-up is nobody's request

    async def generate(
        self,
        prompt_token_ids: list[int],
        params: GenerationParams,
        kind: RequestKind = "client",
        request_id: str | None = None,
    ) -> AsyncIterator[Delta]:
        """Stream a generation; closing the iterator early aborts the engine request."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # A seed with a temperature above vLLM's greedy threshold makes a seeded generator
        # (a greedy request makes none, and is served).
        if params.seed is not None and params.temperature >= 1e-5 \
                and self.profile.device == "cpu" and aligned_cache(self.profile):
            raise RequestRejected(
                f"'seed' is not supported on profile {self.profile.name} unless temperature "
                "is 0: vLLM's CPU sampler cannot rewind a seeded generator over the chunked "
                "prefill a hybrid model's prefix cache needs (it would stop the engine)")
        request_id = request_id or f"{kind}-{uuid.uuid4().hex}"
        extra: dict = {KIND_KEY: kind}
        if params.script_ids is not None:
            extra["tandem_script_ids"] = [*params.script_ids, self.tokens.end_of_turn]
        ban = params.ban_tool_call if params.ban_tool_call is not None else kind == "background"
        if ban and self.tokens.tool_call is not None:  # a model without the token: a no-op
            extra["banned_token_ids"] = [self.tokens.tool_call]
        sampling = _sampling(
            SamplingParams,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            seed=params.seed,
            stop=list(params.stop) or None,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            repetition_penalty=params.repetition_penalty,
            min_p=params.min_p,
            logit_bias=dict(params.logit_bias) or None,
            stop_token_ids=[self.tokens.end_of_turn],
            output_kind=RequestOutputKind.DELTA,
            skip_special_tokens=True,
            extra_args=extra,
            structured_outputs=structured_outputs(params),
            logprob_token_ids=list(params.logprob_token_ids) if params.logprob_token_ids
            else None,
            # named ids take the place of the likeliest N, as vLLM's API server has it
            logprobs=None if params.logprob_token_ids else params.top_logprobs,
            allowed_token_ids=list(params.allowed_token_ids) if params.allowed_token_ids
            else None,
            min_tokens=params.min_tokens,
            prompt_logprobs=params.prompt_logprobs,
            thinking_token_budget=params.thinking_token_budget,
        )
        if self.dead:
            raise EngineDead()
        priority = (BACKGROUND_PRIORITY if kind == "background" else
                    DEFERRED_PRIORITY if params.deferred else CLIENT_PRIORITY)
        timings = RequestTimings(kind=kind, prompt_tokens=len(prompt_token_ids),
                                 request_id=request_id)
        self._running[request_id] = _Running(kind)
        self.stats.started(kind)
        finished = False
        prompt: dict = {"prompt_token_ids": list(prompt_token_ids)}
        if params.cache_salt:
            prompt["cache_salt"] = params.cache_salt
        stream = self._llm.generate(prompt, sampling, request_id, priority=priority)
        try:
            async for out in _alive(stream):
                completion = out.outputs[0]
                new_ids = list(completion.token_ids)
                timings.tokens(len(new_ids))
                finished = out.finished
                delta = Delta(
                    request_id=request_id,
                    text=completion.text,
                    token_ids=new_ids,
                    finished=out.finished,
                    finish_reason=completion.finish_reason if out.finished else None,
                    stop_reason=completion.stop_reason if out.finished else None,
                    prompt_tokens=len(prompt_token_ids),
                    cached_tokens=out.num_cached_tokens or 0,
                    logprobs=[{t: lp.logprob for t, lp in step.items()}
                              for step in completion.logprobs or ()],
                    token_logprobs=token_logprobs(new_ids, completion.logprobs, params)
                    if params.top_logprobs is not None else [],
                    # vLLM's delta outputs carry them once, then empty lists
                    prompt_logprobs=prompt_logprobs(out.prompt_logprobs)
                    if out.prompt_logprobs else None,
                )
                if out.finished:
                    close_timings(delta, timings, self.stats)
                yield delta
        finally:
            self._running.pop(request_id, None)
            if not finished:
                # The caller stopped reading (client gone, caller cancelled): closing vLLM's
                # stream aborts the request in the engine core and frees its slot.
                self.stats.aborted(kind)
                try:
                    await stream.aclose()
                except Exception:
                    if not self.dead:  # a dead core has nothing left to abort
                        raise

    async def abort(self, request_id: str) -> None:
        await self._llm.abort(request_id)

    @property
    def dead(self) -> bool:
        """vLLM's monitor thread saw the engine core process exit (or it was shut down)."""
        return self._llm is None or self._llm.errored

    def running(self, kind: RequestKind | None = None) -> list[str]:
        return [rid for rid, r in self._running.items() if kind is None or r.kind == kind]

    async def wait_idle(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self._running and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def shutdown(self) -> None:
        """Stop the engine core; idempotent."""
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.shutdown()
            # AsyncLLM.__del__ shuts down again; at interpreter exit, with vLLM's module
            # globals gone, that prints a TypeError traceback. Once is enough.
            llm.shutdown = lambda *args, **kwargs: None
