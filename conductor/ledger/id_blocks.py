"""Token ids held in shared blocks, the way vLLM's prefix cache shares KV blocks.

A conversation's records are one prompt growing turn by turn, and its branches (a
regenerate, an edit) share everything before they part: held as flat copies, a session of
30k tokens with four records held 100k ids. Here a record's ids are full blocks of
`BLOCK_SIZE` ids, each named by a hash of its content and of every id before it (so two
records share a block only when they agree up to its end), held once however many records
use it, and a short tail of their own. A record then costs what it does not share.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

BLOCK_SIZE = 256
_BYTES = 4  # array("i")


class BlockIds(Sequence[int]):
    """A record's ids: shared blocks, then its own tail. Read as one sequence; slicing or
    `to_array` makes a flat copy (a request's, not the ledger's)."""

    __slots__ = ("keys", "blocks", "tail", "held")

    def __init__(self, keys: tuple[bytes, ...], blocks: tuple[array, ...], tail: array) -> None:
        self.keys, self.blocks, self.tail = keys, blocks, tail
        self.held = True  # until IdBlocks.release: a second release is a ledger bug

    def __len__(self) -> int:
        return len(self.blocks) * BLOCK_SIZE + len(self.tail)

    def to_array(self, stop: int | None = None) -> array:
        """The ids as one flat array: all of them, or the blocks (and the tail) holding
        the first `stop` (the array may run past `stop`, to its block's end)."""
        flat = array("i")
        wanted = len(self.blocks) if stop is None else -(-stop // BLOCK_SIZE)
        for block in self.blocks[:wanted]:
            flat.extend(block)
        if wanted >= len(self.blocks):
            flat.extend(self.tail)
        return flat

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> array: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step < 0:
                return self.to_array()[index]
            # a record's head (the prewarm's, a replay's cut): only the blocks it spans
            return self.to_array(stop)[start:stop:step]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        block, at = divmod(index, BLOCK_SIZE)
        return self.blocks[block][at] if block < len(self.blocks) else self.tail[at]

    def __iter__(self) -> Iterator[int]:
        for block in self.blocks:
            yield from block
        yield from self.tail

    def index(self, value: int, start: int = 0, stop: int | None = None) -> int:
        return self.to_array().index(value, start, len(self) if stop is None else stop)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockIds):
            return self.keys == other.keys and self.tail == other.tail
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BlockIds({len(self)} ids, {len(self.blocks)} blocks)"


class IdBlocks:
    """The blocks every record's ids are made of, counted by use. Not thread-safe: the
    ledger calls it under its lock."""

    def __init__(self) -> None:
        self._blocks: dict[bytes, list] = {}  # key -> [block, records using it]
        self.ids_held = 0  # ids in blocks and tails: what the ledger's bound counts

    def hold(self, ids: Iterable[int]) -> BlockIds:
        """`ids` as shared blocks and a tail of their own."""
        flat = ids.to_array() if isinstance(ids, BlockIds) else array("i", ids)
        raw = flat.tobytes()
        chain = hashlib.blake2b(digest_size=16)
        keys, blocks = [], []
        step = BLOCK_SIZE * _BYTES
        for start in range(0, len(flat) // BLOCK_SIZE * step, step):
            chain.update(raw[start:start + step])
            key = chain.digest()
            entry = self._blocks.get(key)
            if entry is None:
                block = array("i")
                block.frombytes(raw[start:start + step])
                entry = self._blocks[key] = [block, 0]
                self.ids_held += BLOCK_SIZE
            entry[1] += 1
            keys.append(key)
            blocks.append(entry[0])
        tail = flat[len(blocks) * BLOCK_SIZE:]
        self.ids_held += len(tail)
        return BlockIds(tuple(keys), tuple(blocks), tail)

    def release(self, ids: BlockIds) -> None:
        """A record's ids are gone: blocks no other record uses go too."""
        # a second release of one record would free blocks other records still use
        assert ids.held, "a record's ids released twice"
        ids.held = False
        for key in ids.keys:
            entry = self._blocks.get(key)
            assert entry is not None and entry[1] > 0, "ids never held by these blocks"
            entry[1] -= 1
            if entry[1] == 0:
                del self._blocks[key]
                self.ids_held -= BLOCK_SIZE
        self.ids_held -= len(ids.tail)
        assert self.ids_held >= 0, "more ids released than held"

    @property
    def blocks(self) -> int:
        return len(self._blocks)


def flat_ids(ids: Sequence[int]) -> array:
    """Any record's ids as one flat array("i")."""
    return ids.to_array() if isinstance(ids, BlockIds) else array("i", ids)
