"""The conversational set: long multi-session conversations laid out as history turns,
and the questions asked about them with the turns that hold their answers.

Built from `convo_topics.py` by a seeded layout, so every run builds the same set:
conversation n takes `TOPICS_A_CONVERSATION` topics, fills their slots, places each part
in a later session than the one before, the look-alikes in other sessions, and small
talk around them. Sessions are weeks apart, turns minutes apart, written as the history
layer writes them (`history/turns/YYYY/MM/DD/<seq>.json`).

Split by topic, not by conversation: a topic's questions are in one split only, so
nothing tuned on the `dev` questions has seen a `test` question's wording.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.search.convo_topics import FILLERS, TOPICS
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.storage.atomic import atomic_write

CONVERSATIONS = 8
TOPICS_A_CONVERSATION = 18
SESSIONS = 10
FILLERS_A_SESSION = (6, 10)
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SPLIT_SEED = "tandem-conversational-split"


def split_of(topic_key: str) -> str:
    """Half the topics are for tuning (dev), the other half for reporting (test)."""
    keys = sorted(t["key"] for t in TOPICS)
    random.Random(SPLIT_SEED).shuffle(keys)
    return "dev" if keys.index(topic_key) < len(keys) // 2 else "test"


@dataclass(frozen=True)
class Question:
    conversation: str  # the user whose history holds it
    topic: str
    kind: str
    query: str
    evidence: tuple[tuple[str, str], ...]  # (turn file relative to turns/, side)
    split: str


@dataclass
class _Placed:
    session: int
    said: str
    answered: str
    rel: str = ""  # set once written


def build(root: Path, n: int) -> list[Question]:
    """Conversation `n` under `root` (a memory root) as user `convo-<n>`; its questions."""
    rng = random.Random(f"tandem-conversation-{n}")
    user = f"convo-{n}"
    topics = rng.sample(TOPICS, TOPICS_A_CONVERSATION)
    placed: list[_Placed] = []
    plans = []
    for topic in topics:
        slots = {name: rng.choice(values) for name, values in topic["slots"].items()}
        sessions = sorted(rng.sample(range(SESSIONS), len(topic["parts"])))
        parts = [_Placed(s, *(_fill(t, slots) for t in pair))
                 for s, pair in zip(sessions, topic["parts"], strict=True)]
        decoys = [_Placed(rng.randrange(SESSIONS), *(_fill(t, slots) for t in pair))
                  for pair in topic["decoys"]]
        placed += parts + decoys
        plans.append((topic, slots, parts, decoys))
    for session in range(SESSIONS):
        for said, answered in rng.sample(FILLERS, rng.randint(*FILLERS_A_SESSION)):
            placed.append(_Placed(session, said, answered))
    _write(root, user, placed, rng)
    questions = []
    for topic, slots, parts, decoys in plans:
        for kind, text, needs, side in topic["questions"]:
            query = _query(text, slots, parts)
            if query is None:
                continue
            turns = [decoys[int(k[5:])] if isinstance(k, str) else parts[k] for k in needs]
            questions.append(Question(user, topic["key"], kind, query,
                                      tuple((t.rel, side) for t in turns),
                                      split_of(topic["key"])))
    return questions


def _fill(template: str, slots: dict[str, str]) -> str:
    return template.format(**slots)


def _query(text: str, slots: dict[str, str], parts: list[_Placed]) -> str | None:
    """The question with its slots and months filled; None when two parts it tells apart
    by their month were told in one month (the question would have no one answer)."""
    months = {int(i): _when(parts[int(i)].session).strftime("%B")
              for i in re.findall(r"\{month:(\d)\}", text)}
    if "{month:" in text and len({_when(p.session).strftime("%B") for p in parts}) < len(parts):
        return None
    for i, month in months.items():
        text = text.replace(f"{{month:{i}}}", month)
    return text.format(**slots)


def _when(session: int) -> datetime:
    return START + timedelta(days=session * 27)


def _write(root: Path, user: str, placed: list[_Placed], rng: random.Random) -> None:
    """The turns in session order, shuffled within a session (a topic's parts are in
    sessions of their own order), as the history layer writes them."""
    folder = root / "layers" / user / "history" / "turns"
    by_session: dict[int, list[_Placed]] = {}
    for turn in placed:
        by_session.setdefault(turn.session, []).append(turn)
    seq = 0
    for session in sorted(by_session):
        turns = by_session[session]
        rng.shuffle(turns)
        moment = _when(session) + timedelta(hours=rng.randint(0, 10))
        for turn in turns:
            seq += 1
            moment += timedelta(minutes=rng.randint(1, 6))
            record = Turn(seq, moment, 60, (TurnMessage("user", (Part("text", turn.said),)),
                                            TurnMessage("assistant",
                                                        (Part("text", turn.answered),))))
            turn.rel = f"{moment:%Y/%m/%d}/{seq:08d}.json"
            atomic_write(folder / turn.rel, json.dumps(record.to_json()) + "\n",
                         durable=False)


def build_all(root: Path, count: int = CONVERSATIONS) -> list[Question]:
    questions = []
    for n in range(count):
        questions += build(root, n)
    return questions
