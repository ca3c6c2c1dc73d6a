"""The tool-call ban: background rows can never sample the tool-call token.

A request with `extra_args["banned_token_ids"]` (the engine puts Qwen's `<tool_call>` there
for background turns) gets the OpenAI-style logit bias of -100 on those ids, which as in
OpenAI's API means a ban; it is applied as -inf so no logit, however high, brings them back.
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from kernels.rows import RowStates, extra_args

BAN_KEY = "banned_token_ids"


def _banned(params, _output_ids: list[int]) -> list[int] | None:
    return list(extra_args(params).get(BAN_KEY) or ()) or None


class ToolCallBanProcessor(LogitsProcessor):
    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self._rows: RowStates[list[int]] = RowStates(_banned)

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        self._rows.update(batch_update)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[-1]
        for row, banned in self._rows.rows.items():
            logits[row, [t for t in banned if t < vocab]] = float("-inf")
        return logits
