"""Shared id blocks (`conductor/ledger/id_blocks.py`), property tests: whatever records are
held and released, each reads back as the ids it was given, a block is held once however
many records share it, and releasing every record leaves nothing held."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conductor.ledger.id_blocks import BLOCK_SIZE, IdBlocks, flat_ids

# Records grown from a few stems, as a conversation's turns and branches grow: they share
# long prefixes, and differ after them.
STEMS = st.lists(st.lists(st.integers(-3, 3), min_size=0, max_size=3 * BLOCK_SIZE),
                 min_size=1, max_size=3)
GROWTH = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2 * BLOCK_SIZE),
                            st.lists(st.integers(-3, 3), max_size=BLOCK_SIZE + 5),
                            st.booleans()), max_size=12)


def expected_held(records: list) -> int:
    """The model: distinct (prefix up to a block's end) once, each tail whole."""
    blocks = {tuple(ids[: (n + 1) * BLOCK_SIZE]) for ids in records
              for n in range(len(ids) // BLOCK_SIZE)}
    return len(blocks) * BLOCK_SIZE + sum(len(ids) % BLOCK_SIZE for ids in records)


@settings(max_examples=200, deadline=None)
@given(stems=STEMS, growth=GROWTH)
def test_held_ids_read_back_and_each_shared_block_counts_once(stems, growth):
    store = IdBlocks()
    held: list[tuple[list[int], object]] = []
    for stem, cut, extra, release in growth:
        base = stems[stem % len(stems)]
        ids = [*base[: cut], *extra]
        held.append((ids, store.hold(ids)))
        if release and len(held) > 1:
            _, gone = held.pop(0)
            store.release(gone)
        for original, blocks in held:
            assert list(blocks) == original and len(blocks) == len(original)
            assert list(flat_ids(blocks)) == original
            if original:
                assert blocks[len(original) - 1] == original[-1]
                assert list(blocks[1:-1]) == original[1:-1]
            # a slice flattens only the blocks it spans: still the same ids
            for cut in {0, 1, BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, len(original) // 2,
                        len(original), len(original) + 5}:
                assert list(blocks[:cut]) == original[:cut]
                assert list(blocks[cut // 3:cut:2]) == original[cut // 3:cut:2]
                assert list(blocks[:-cut]) == original[:-cut]
                assert list(blocks[cut::-1]) == original[cut::-1]
        assert store.ids_held == expected_held([ids for ids, _ in held])
    for _, blocks in held:
        store.release(blocks)
    assert store.ids_held == 0 and store.blocks == 0


def test_a_conversation_of_ten_turns_holds_its_ids_about_once():
    store = IdBlocks()
    ids: list[int] = []
    for turn in range(10):
        ids = [*ids, *range(turn * 3000, turn * 3000 + 3000)]
        store.hold(ids)
    # ten records of 3k..30k ids (165k in all) cost the last one's ids and nine tails
    assert store.ids_held <= len(ids) + 9 * BLOCK_SIZE


def test_a_record_released_twice_is_refused_before_it_frees_a_block_another_record_holds():
    store = IdBlocks()
    shared = list(range(2 * BLOCK_SIZE))
    first, second = store.hold(shared), store.hold([*shared, 7])
    store.release(first)
    with pytest.raises(AssertionError, match="released twice"):
        store.release(first)
    assert store.blocks == 2 and list(second) == [*shared, 7]


def test_ids_from_other_blocks_are_refused_on_release():
    elsewhere = IdBlocks().hold(range(BLOCK_SIZE))
    with pytest.raises(AssertionError, match="never held"):
        IdBlocks().release(elsewhere)
