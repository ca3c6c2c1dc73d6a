"""Prewarm: when the shared memory context changes, prefill it in idle time behind the
heads (system prompt + tools) seen last, so the next new session finds it cached; and
behind each such head and its shared context, one branch per likely note (the note's
matched tail, as a new session's first message that matches it gets it: right after the
shared context), so that session reads its note from the cache too (issue 58, item 3).

Each prewarm is one background request: lowest priority, one token, ended by any client
request at the next engine step, never started while a client request is in flight, never
recorded as a turn. A preempted prewarm stays due and runs in a later idle moment.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from conductor.memory.context import ContextGroup
from conductor.memory.hiding import Branch, Stale, likely_notes, lone_match_tail
from server.idle.idle import IdleService
from server.turn.prompt import filler_id, hidden_message_ids, shared_context_ids

log = logging.getLogger("tandem.prewarm")


@dataclass(frozen=True)
class PrewarmRun:
    prompt_tokens: int
    cached_tokens: int  # what the cache already held of it (the head, at least)
    outcome: str  # "done" or "preempted"
    kind: str = "shared"  # "shared": head + shared context; "note": a likely note's branch
    note_id: str | None = None  # a branch's note


class PrewarmService(IdleService):
    name = "prewarm"

    async def tick(self) -> list[PrewarmRun]:
        """Prewarm every stale head, most recent group first, then each head's likely
        notes' branches, while nobody is waiting."""
        runs: list[PrewarmRun] = []
        heads = self.memory.idle.prewarm
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
            if not await self._branches(group, shared.version, shared.text, runs):
                break
        return self.kept(runs)

    def _branches_help(self, group: ContextGroup) -> bool:
        """Whether a branch can be read from the cache by the session that matches its
        note: the notes are matched (memory reads, one match or more) and placed before
        the message; and the engine caches a prompt block by block (a hybrid model keeps
        its recurrent state at one boundary a request, and a tail of about 90 tokens
        rarely holds one: no branch is worth its prefill there)."""
        return self.memory.idle.prewarms_branches(group.reads, self.memory.notes_shown) \
            and not self.engine.reuse_block

    async def _branches(self, group: ContextGroup, version: str, text: str,
                        runs: list[PrewarmRun]) -> bool:
        """Prefill the group's due branches after its shared context (`version`, `text`)
        into `runs`; False when a client came."""
        if not self._branches_help(group):
            return True
        heads = self.memory.idle.prewarm
        likely = await asyncio.to_thread(likely_notes, self.memory.store(group.user),
                                         group.project, heads.notes)
        for branch in heads.branches_due(group, version, likely):
            if self.client_busy():
                return False
            tail = lone_match_tail(branch.note.note, self.memory.notes_shown,
                                   self.engine.count_tokens)
            if tail is None:  # over the match budget: no message gets it alone
                heads.branch_warmed(branch, version)
                continue
            run = await self._prefill_branch(branch, text, tail)
            if run.outcome == "done":
                heads.branch_warmed(branch, version)
            runs.append(run)
        return True

    def _context_ids(self, head_ids: tuple[int, ...], text: str) -> list[int]:
        """The head and the shared context after it, as a new session's prompt has them."""
        return [*head_ids, *shared_context_ids(self.engine.tokenizer, text, len(head_ids),
                                               self.engine.reuse_block)]

    async def _prefill(self, stale: Stale, text: str) -> PrewarmRun:
        tokenizer = self.engine.tokenizer
        ids = self._context_ids(stale.head_ids, text)
        if self.engine.reuse_block:
            # A hybrid model keeps one recurrent state per prompt, at its last block
            # boundary before the last token: one token past the context's end puts it there.
            ids.append(filler_id(tokenizer))
        return await self._run(stale.group.user, ids, "shared")

    async def _prefill_branch(self, branch: Branch, shared: str, tail: str) -> PrewarmRun:
        """head + shared context + the note's matched tail: a new session's prompt up to
        its first message, when that message matches this note alone."""
        ids = [*self._context_ids(branch.head_ids, shared),
               *hidden_message_ids(self.engine.tokenizer, tail)]
        return await self._run(branch.group.user, ids, "note", branch.note.note_id)

    async def _run(self, user: str, ids: list[int], kind: str,
                   note_id: str | None = None) -> PrewarmRun:
        cached, outcome = await self.prefill(user, ids)
        # ids and counts only: never a note's title or text
        log.info("prewarm %s %s: %d prompt tokens, %d cached", kind, outcome, len(ids), cached)
        if self.memory.metrics is not None:
            self.memory.metrics.background_run("prewarm", outcome)
        return PrewarmRun(len(ids), cached, outcome, kind, note_id)
