"""Hypothesis strategies for text a client may send that is not quite text."""

from __future__ import annotations

from hypothesis import strategies as st

# A lone UTF-16 surrogate: JSON can spell one (`\ud800`), json.loads and pydantic take it.
SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"])
WITH_SURROGATE = st.tuples(st.text(max_size=10), SURROGATE, st.text(max_size=10)).map(
    "".join)
