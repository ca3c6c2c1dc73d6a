"""Per-row state for batch-level logits processors: follows vLLM's add/remove/move updates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

T = TypeVar("T")


class RowStates(Generic[T]):
    """Maps persistent-batch row index -> this processor's state for the request in that row."""

    def __init__(self, make: Callable[[SamplingParams, list[int]], T | None]) -> None:
        self._make = make
        self.rows: dict[int, T] = {}

    def update(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        # vLLM's contract: apply removals, then additions, then moves.
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, params, _prompt_ids, output_ids in batch_update.added:
            state = self._make(params, output_ids) if params is not None else None
            if state is None:
                self.rows.pop(index, None)
            else:
                self.rows[index] = state
        for first, second, direction in batch_update.moved:
            moved_first = self.rows.pop(first, None)
            moved_second = self.rows.pop(second, None)
            if moved_first is not None:
                self.rows[second] = moved_first
            if direction == MoveDirectionality.SWAP and moved_second is not None:
                self.rows[first] = moved_second


def extra_args(params: SamplingParams) -> dict:
    return params.extra_args or {}
