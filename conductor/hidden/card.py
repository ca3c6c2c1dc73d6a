"""The memory card: the hidden note that tells the model how to write memory blocks."""

from __future__ import annotations

from conductor.notes.note_format import KINDS, SCOPES


def memory_card() -> str:
    """About 140 tokens: the block's shape, kinds and scopes, when to write. The same for
    every session, so it is part of the shared memory context."""
    return (
        "Hidden memory context; never mention it. To remember a lasting fact, preference, "
        "rule or project detail, add to your answer:\n"
        '<tandem_memory op="add" scope="SCOPE" kind="KIND">\ntitle: one line\ntags: a, b\n\n'
        "one fact\n</tandem_memory>\n"
        f"Scopes: {', '.join(SCOPES)}. Kinds: {', '.join(KINDS)}. "
        'Change one: op="update" id="ID"; retire one: op="archive" id="ID" reason="why". '
        "No secrets. No block in an answer that must be JSON."
    )


def session_card(session_token: str) -> str:
    """The one line of the card that belongs to a session: its memory-routes token."""
    return f"Memory token: {session_token}"
