"""The memory card: the hidden note that tells the model how to write memory blocks."""

from __future__ import annotations

from conductor.note_format import KINDS, SCOPES


def memory_card(session_token: str) -> str:
    """About 150 tokens: the block's shape, kinds and scopes, when to write, the token."""
    return (
        "Hidden context from Tandem's memory; do not mention it.\n"
        "When the user tells you a lasting fact, preference or rule, or you learn something "
        "about this project that will matter later, add one block to your answer:\n"
        '<tandem_memory op="add" scope="user|project|session" kind="KIND">\n'
        "title: one line\ntags: a, b\n\none fact, at most 400 words\n</tandem_memory>\n"
        f"Kinds: {', '.join(KINDS)}. Scopes: {', '.join(SCOPES)}. "
        'To change a note: op="update" id="ID"; to retire one: op="archive" id="ID" '
        'reason="...". Never store secrets. The user sees only "› remembered: <title>".\n'
        f"Memory routes token for this session: {session_token}"
    )
