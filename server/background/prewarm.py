"""Prewarm: when the shared memory context changes, prefill it in idle time behind the
heads (system prompt + tools) seen last, so the next new session finds it cached.

Each prewarm is one background request: lowest priority, one token, ended by any client
request at the next engine step, never started while a client request is in flight, never
recorded as a turn. A preempted prewarm stays due and runs in a later idle moment.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from conductor.memory.hiding import Stale
from server.background.idle import IdleService
from server.turn.prompt import filler_id, shared_context_ids

log = logging.getLogger("tandem.prewarm")


@dataclass(frozen=True)
class PrewarmRun:
    prompt_tokens: int
    cached_tokens: int  # what the cache already held of it (the head, at least)
    outcome: str  # "done" or "preempted"


class PrewarmService(IdleService):
    name = "prewarm"

    async def tick(self) -> list[PrewarmRun]:
        """Prewarm every stale head, most recent group first, while nobody is waiting."""
        runs: list[PrewarmRun] = []
        heads = self.memory.prewarm
        for group in heads.groups():
            if self.client_busy():
                break
            shared = self.memory.shared_context(group.user, group.project, group.card,
                                                group.reads, self.engine.count_tokens)
            if shared is None:
                continue
            for stale in heads.stale(group, shared.version):
                if self.client_busy():
                    return self.kept(runs)
                run = await self._prefill(stale, shared.text)
                if run.outcome == "done":
                    heads.warmed(stale, shared.version)
                runs.append(run)
        return self.kept(runs)

    async def _prefill(self, stale: Stale, text: str) -> PrewarmRun:
        tokenizer, block = self.engine.tokenizer, self.engine.reuse_block
        ids = [*stale.head_ids, *shared_context_ids(tokenizer, text, len(stale.head_ids), block)]
        if block:
            # A hybrid model keeps one recurrent state per prompt, at its last block
            # boundary before the last token: one token past the context's end puts it there.
            ids.append(filler_id(tokenizer))
        cached, outcome = await self.prefill(stale.group.user, ids)
        log.info("prewarm %s: %d prompt tokens, %d cached", outcome, len(ids), cached)
        if self.memory.metrics is not None:
            self.memory.metrics.background_run("prewarm", outcome)
        return PrewarmRun(len(ids), cached, outcome)
