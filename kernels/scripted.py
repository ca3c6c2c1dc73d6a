"""The scripted-output driver of the tiny profile.

A request whose `extra_args["tandem_script_ids"]` holds token ids gets exactly those ids,
one per step (the engine ends the list with the end-of-turn token): every other logit of
its row is pushed far down.
The model's own forward pass, the sampler, the KV cache and the prefix cache all run for
real; only the choice of the next token is made for it. Rows without a script are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from kernels.rows import RowStates, extra_args

SCRIPT_KEY = "tandem_script_ids"
# Finite rather than -inf: a later processor (the tool-call ban) may set the forced token to
# -inf, and a row of all -inf would sample NaN instead of some other token.
_PUSH_DOWN = -1.0e9


@dataclass
class _Script:
    ids: list[int]
    output_ids: list[int]  # vLLM's live list of this request's generated ids

    def next_id(self) -> int:
        position = len(self.output_ids)
        return self.ids[min(position, len(self.ids) - 1)]


def _script_for(params, output_ids: list[int]) -> _Script | None:
    ids = extra_args(params).get(SCRIPT_KEY)
    return _Script(list(ids), output_ids) if ids else None


class ScriptedOutputProcessor(LogitsProcessor):
    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self._rows: RowStates[_Script] = RowStates(_script_for)

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        ids = extra_args(sampling_params).get(SCRIPT_KEY)
        if ids is not None and not all(isinstance(i, int) and i >= 0 for i in ids):
            raise ValueError(f"{SCRIPT_KEY} must be a list of token ids")

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        self._rows.update(batch_update)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, script in self._rows.rows.items():
            target = script.next_id()
            logits[row].fill_(_PUSH_DOWN)
            logits[row, target] = 0.0
        return logits
