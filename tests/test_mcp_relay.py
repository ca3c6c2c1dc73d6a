"""`/mcp` behind a trusted proxy: the relayed X-Tandem-User taken as the chat routes take it."""

from __future__ import annotations

from tests.test_mcp_http import post, remember_call


def test_a_relayed_name_that_can_be_no_one_is_a_400_and_any_other_has_its_own_memory(
        served, tmp_path):
    """Behind a trusted proxy, `/mcp` takes the relayed X-Tandem-User as the chat routes
    do: an empty or control-character name is a 400 saying why (it failed inside the SDK,
    a traceback and "Internal server error"), and `josé` writes to a folder of its own."""
    from conductor.memory.settings import MemorySettings
    from server.app import create_app
    from tests.served import AppOnLoop

    engine = served.app.state.tandem.engine
    app = create_app(engine.profile, tmp_path, engine=engine, memory_settings=MemorySettings(
        user_name="tester", trusted_proxies=frozenset({"127.0.0.1"})))
    relay = AppOnLoop(served, app)
    relay.start()
    try:
        body = remember_call("Boiler key", "The boiler room key hangs by the door.")
        for name in ("", "ann\tbee"):
            refused = post(relay, body, key=None, **{"X-Tandem-User": name})
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["code"] == "invalid_user"
        answered = post(relay, body, key=None, **{"X-Tandem-User": "josé".encode()})
        assert answered.status_code == 200 and '"isError":false' in answered.text.replace(
            " ", "")
        memory = app.state.tandem.memory
        folders = [p.name for p in (memory.root / "notes").iterdir() if p.is_dir()]
        owned = [f for f in folders if f.startswith("jose--")]
        assert len(owned) == 1 and [n.title for n in memory.store(owned[0]).list()] == [
            "Boiler key"]
    finally:
        relay.stop()
