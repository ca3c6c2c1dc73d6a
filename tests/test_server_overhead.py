"""The server's own CPU a request under load (issue 58, item 4): what it keeps from one
request to the next instead of computing again, and the heap the collector leaves alone.
The speed is the overhead bench's (`tandem bench --overhead`); these check behaviour."""

from __future__ import annotations

import gc


def test_the_loaded_server_s_heap_is_frozen_out_of_the_collectors_walk(served):
    """Once the engine is up, the objects the server holds for good (the ledger among
    them) are in the collector's permanent generation, which no collection walks."""
    assert gc.get_freeze_count() > 0
    ledger = served.app.state.tandem.memory.ledger
    assert not any(obj is ledger for obj in gc.get_objects())
