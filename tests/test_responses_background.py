"""Background responses hold under hostile use (issue 53): one user's in flight are
bounded (429 past the bound), `/load` counts them, and they yield the engine to another
user's interactive request without losing their own output."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from server.access.auth import Auth
from server.access.keys import KeyStore
from server.turn.responses import background
from tests.test_responses_store import poll, sdk, serve


@pytest.fixture
def keyed(served, tmp_path):
    """A second app with two users' keys; `(app, alice, bob)`."""
    keys = KeyStore(tmp_path)
    alice, bob = keys.add("alice"), keys.add("bob")
    app = serve(served, tmp_path, auth=Auth(keys=keys))
    yield app, sdk(app, alice), sdk(app, bob)
    app.stop()


def long_background(client: openai.OpenAI, words: int = 2500):
    return client.responses.create(model="tiny", input="Write at length", background=True,
                                   max_output_tokens=words + 50,
                                   extra_body={"script": "word " * words})


def test_a_user_s_background_responses_are_bounded_and_counted_in_load(keyed):
    """Issue 53: any number could be queued, and none was counted in /load."""
    app, alice, bob = keyed

    def load() -> int:
        return httpx.get(f"{app.base_url}/load", headers={
            "Authorization": f"Bearer {alice.api_key}"}).json()["server_load"]

    made = [long_background(alice) for _ in range(background.MAX_PER_USER)]
    try:
        with pytest.raises(openai.RateLimitError) as refused:
            made.append(long_background(alice))
        error = refused.value.body
        assert error["param"] == "background" and "already queued or in progress" in \
            error["message"]
        made.append(long_background(bob))  # another user's bound is their own
        assert load() == background.MAX_PER_USER + 1
        for response in made[1:]:
            (bob if response is made[-1] else alice).responses.cancel(response.id)
        assert load() == 1
        made.append(long_background(alice))  # a slot given back is free again
        for response in (made[0], made[-1]):
            alice.responses.cancel(response.id)
        assert load() == 0
    finally:  # nothing left running on the session's engine, whatever failed
        for response in made:
            for client in (alice, bob):
                try:
                    client.responses.cancel(response.id)
                except openai.NotFoundError:
                    pass


def test_another_user_s_chat_goes_before_one_user_s_background_responses(
        served, tmp_path, monkeypatch):
    """Twelve background responses of one user (eight run, the engine's every slot, four
    wait): another user's short chat is answered before any of them ends, and each of
    them still ends whole (the one that gave its slot resumed where it was). Before, the
    chat waited behind them (64 of them: 106.6 s for a 4-token answer)."""
    monkeypatch.setattr(background, "MAX_PER_USER", 12)
    keys = KeyStore(tmp_path)
    app = serve(served, tmp_path, auth=Auth(keys=keys))
    alice, bob = sdk(app, keys.add("alice")), sdk(app, keys.add("bob"))
    made = []
    try:
        words = 600
        for _ in range(12):
            made.append(long_background(alice, words))
        deadline = time.monotonic() + 60
        while sum(alice.responses.retrieve(r.id).status == "in_progress" for r in made) < 8:
            assert time.monotonic() < deadline, "the first eight started"
            time.sleep(0.05)
        chat = bob.chat.completions.create(model="tiny", messages=[
            {"role": "user", "content": "Hi"}], extra_body={"script": "Hello there."})
        statuses = [alice.responses.retrieve(r.id).status for r in made]
        assert chat.choices[0].message.content == "Hello there."
        assert "completed" not in statuses, statuses
        for response in made:
            done = poll(alice, response.id, timeout=300)
            assert done.status == "completed"
            assert done.output_text.strip() == ("word " * words).strip()
    finally:
        for response in made:  # nothing left running on the session's engine
            alice.responses.cancel(response.id)
        app.stop()
