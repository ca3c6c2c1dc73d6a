"""The recorded shapes of plain vLLM's responses (tests/data/vllm_shapes.json, which the
main session compares Tandem's with) still hold for the vLLM installed here: the endpoint
session's live server answers the same requests in the same shapes."""

from __future__ import annotations

import pytest

from tests.record_vllm_shapes import responses
from tests.shapes import vllm_shapes

pytestmark = pytest.mark.endpoint


def test_the_recorded_vllm_shapes_match_the_live_server(plain_vllm_server):
    assert responses(plain_vllm_server, "tiny-plain") == vllm_shapes()
