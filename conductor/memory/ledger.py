"""The ledger's records (what each turn's prompt was, id for id, with its hidden spans) and
the Responses API's stored responses.

Part of memory's front door (`conductor.memory`): what the server may use of
`conductor/ledger/`, and nothing deeper."""

from __future__ import annotations

from conductor.ledger.id_blocks import flat_ids
from conductor.ledger.records import Ledger, Match, Record, Span, VisibleMessage
from conductor.ledger.stored_responses import (
    ChainBroken,
    ResponseStore,
    StoredResponse,
    new_response_id,
)

__all__ = [
    "ChainBroken",
    "Ledger",
    "Match",
    "Record",
    "ResponseStore",
    "Span",
    "StoredResponse",
    "VisibleMessage",
    "flat_ids",
    "new_response_id",
]
