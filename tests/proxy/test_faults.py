"""A backend that fails mid-answer (a relay in front of the real one: a 500, a cut
stream, a stall, an error event): a 502 or 504 with the reason, nothing kept, and the
same turn whole once the backend is back."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.proxy.conftest import BLOCK, USER, Backend, chat, proxy_app
from tests.proxy.fault_relay import FAULTS, FaultRelay
from tests.served import ServedApp

pytestmark = pytest.mark.endpoint


@pytest.fixture
def relay(plain_vllm_server):
    relay = FaultRelay(plain_vllm_server.removesuffix("/v1"))
    served = ServedApp(relay.app)
    served.start(ready_timeout=30)
    relay.base = served.base_url
    yield relay
    served.stop()


REASONS = {"status_500": (502, "backend_error", "the backend answered 500: out of memory"),
           "cut": (502, "backend_error", "the backend's stream was cut"),
           "stall": (504, "backend_timeout", "the backend did not answer in time"),
           "error_event": (502, "backend_error", "the engine failed (injected)")}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("fault", FAULTS)
def test_a_backend_that_fails_mid_answer_is_a_502_or_504_and_nothing_is_kept(
        relay, tmp_path, fault, stream):
    relay.fault, relay.stall_s = fault, 6.0
    served = ServedApp(proxy_app(Backend("vllm", relay.base, "tiny-plain"), tmp_path,
                                 timeout_s=2.0))
    served.start(ready_timeout=60)
    try:
        status, code, reason = REASONS[fault]
        response = chat(served.base_url, [{"role": "user", "content": "my kettle is blue"}],
                        script=BLOCK, max_tokens=120, stream=stream, session="faults")
        if stream and fault in ("cut", "error_event"):
            # the answer had begun: the stream ends with the error, as vLLM's does
            assert response.status_code == 200
            events = [line[6:] for line in response.text.splitlines()
                      if line.startswith("data: ")]
            assert events[-1] == "[DONE]"
            error = json.loads(events[-2])["error"]
        else:
            assert response.status_code == status, response.text
            error = response.json()["error"]
        assert error["code"] == code and reason in error["message"], error
        memory = served.app.state.tandem.memory
        assert memory.records(USER, "faults") == []
        assert memory.store(USER).list() == []
        assert httpx.get(f"{served.base_url}/readyz", timeout=10).status_code == 200
        relay.fault = None  # the backend is back: the same turn goes through whole
        again = chat(served.base_url, [{"role": "user", "content": "my kettle is blue"}],
                     script=BLOCK, max_tokens=120, session="faults")
        assert again.status_code == 200, again.text
        assert [n.title for n in memory.store(USER).list()] == ["the kettle is blue"]
    finally:
        served.stop()
