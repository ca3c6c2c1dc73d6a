"""The record's prefill: on a hybrid-attention engine, after an answer, prefill in idle
time what the session's next turn will start with (the record: prompt and answer) and
one token more.

vLLM keeps such a model's recurrent state once a request, at the last block boundary
before its prompt's last token (align mode). The answer's turn leaves it before the
answer, so the next turn, which replays the record, would read the cache only to there
and prefill up to a block, the answer and its own message again. This background request
leaves a state at the last boundary before the next turn's own tokens (the prewarm's
rule, one token past the end). Measured in bench/hybrid/bars.py: every later turn reads
0.95 of its prompt from 10,477 tokens on instead of 14,511.

Each prefill is one background request, as the prewarm's: lowest priority, one token,
ended by any client request at the next engine step, never started while a client
request is in flight, never recorded as a turn; one that gave way stays due. A dense
engine (every block cached as it is read) and proxy mode (the backend's cache is its
own) have no `reuse_block`: nothing is queued for them and this service sends nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from server.idle.idle import IdleService
from server.turn.prompt import filler_id
from server.turn.replay import next_turn_replays

log = logging.getLogger("tandem.record_prefill")


@dataclass(frozen=True)
class RecordPrefillRun:
    prompt_tokens: int  # the record's replayed ids and the one token past them
    cached_tokens: int  # what the cache already held (to the answer's turn's boundary)
    outcome: str  # "done" or "preempted"


class RecordPrefillService(IdleService):
    name = "record_prefill"

    async def tick(self) -> list[RecordPrefillRun]:
        """Prefill each due session's newest record, most recent first, while nobody waits."""
        runs: list[RecordPrefillRun] = []
        due = self.memory.idle.records_due
        while not self.client_busy() and (key := due.take()) is not None:
            record = self.memory.latest_record(*key)
            ids = None if record is None else next_turn_replays(self.engine.tokenizer, record)
            if not ids or len(ids) + 2 > self.engine.profile.max_model_len:
                continue  # gone, rendered afresh next turn, or no room for the token past
            run = await self._prefill(key[0], ids)
            runs.append(run)
            if run.outcome == "preempted":
                due.again(*key)
                break
        return self.kept(runs)

    async def _prefill(self, user: str, ids: list[int]) -> RecordPrefillRun:
        # One token past the end: the state lands at the last boundary at or before it.
        prompt = [*ids, filler_id(self.engine.tokenizer)]
        cached, outcome = await self.prefill(user, prompt)  # under the turn's own salt
        log.info("record prefill %s: %d prompt tokens, %d cached", outcome, len(prompt),
                 cached)
        if self.memory.metrics is not None:
            self.memory.metrics.background_run(self.name, outcome)
        return RecordPrefillRun(len(prompt), cached, outcome)
