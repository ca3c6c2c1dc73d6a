"""A cognition job on an OpenAI-compatible endpoint: plain vLLM's own server on the tiny
model, a real backend. Its own pytest session (`make test` runs it second), so each
session starts one engine: `-m endpoint`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from conductor.cognition.job import JobCaps
from conductor.cognition.jobs import JOBS
from conductor.cognition.runner import run_job
from conductor.layers.conversation import WindowBounds
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.layers.user_layers import UserLayers
from conductor.layers.working import SECTIONS
from server.idle.job_backends import EndpointJobBackend

pytestmark = pytest.mark.endpoint
VERIFY, CONSOLIDATE, EXTRACT = JOBS
SMALL = JobCaps(max_items=2, max_chars=40, max_flags=2, reason_chars=24)


@pytest.fixture(scope="module")
def vllm_server(plain_vllm_server):
    return plain_vllm_server


def layers_with_turns(tmp_path, n: int) -> UserLayers:
    layers = UserLayers(tmp_path, "ada")
    layers.ensure()
    for i in range(n):
        layers.history.append(lambda seq, i=i: Turn(seq, datetime(2026, 11, 30, tzinfo=UTC), 0, (
            TurnMessage("user", (Part("text", f"question {i} about the release"),)),
            TurnMessage("assistant", (Part("text", f"answer {i}"),)))))
    return layers


@pytest.mark.parametrize("job", list(JOBS))
def test_a_job_runs_on_an_endpoint_with_the_same_schema(vllm_server, tmp_path, job):
    layers = layers_with_turns(tmp_path, 7)
    backend = EndpointJobBackend(vllm_server, "tiny-plain")
    record = asyncio.run(run_job(JOBS[job], layers, backend, "manual", WindowBounds(40, 1500),
                                 len, SMALL, 1200))
    assert record.provider == "endpoint" and record.model == "tiny-plain"
    assert record.outcome in ("changed", "unchanged"), record
    assert record.prompt_tokens > 0 and record.output_tokens > 0
    wm = layers.files.working_memory.read_text()
    assert [line[3:] for line in wm.splitlines() if line.startswith("## ")] == list(SECTIONS)


def test_an_endpoint_that_refuses_is_a_failed_run_with_its_status(vllm_server, tmp_path):
    layers = layers_with_turns(tmp_path, 2)
    backend = EndpointJobBackend(vllm_server, "no-such-model")
    record = asyncio.run(run_job(JOBS[VERIFY], layers, backend, "manual", WindowBounds(40, 1500),
                                 len, SMALL, 64))
    assert record.outcome == "failed" and record.reason == "endpoint_http_404"
    assert record.checkpoint_after == record.checkpoint_before == 0
