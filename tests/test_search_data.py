"""The search bench's labelled set says what it claims: every answer exists as a chunk,
the kinds are there in number, and a paraphrase shares no content word with its answer."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from conductor.search.chunks import split_markdown

DATA = Path(__file__).resolve().parent.parent / "bench" / "search" / "data"
STOPWORDS = set("""a an the to of in on at by for from with and or if is are be been was were
it its we our us you your i my me he she they them their this that these those what which
who whom when where why how do does did can could should would will may must not no so as
into onto than then there here all any some each every before after over under up down
out off about again once too very just get gets got""".split())


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


def chunks() -> dict[tuple[str, str], str]:
    out = {}
    for path in sorted((DATA / "corpus").glob("*.md")):
        for chunk in split_markdown(path.read_text()):
            out[(path.name, chunk.section)] = f"{chunk.section} {chunk.text}"
    return out


def queries() -> list[dict]:
    return [json.loads(line) for line in (DATA / "queries.jsonl").read_text().splitlines()]


def test_every_answer_is_a_chunk_of_the_corpus_and_the_set_is_big_enough():
    found = chunks()
    assert all((q["path"], q["section"]) in found for q in queries())
    kinds = Counter(q["kind"] for q in queries())
    assert sum(kinds.values()) >= 40 and min(kinds.values()) >= 10, kinds


def test_a_paraphrase_shares_no_content_word_with_its_answer():
    found = chunks()
    for q in (q for q in queries() if q["kind"] == "paraphrase"):
        shared = words(q["query"]) & words(found[(q["path"], q["section"])])
        assert not shared, (q["query"], shared)


def test_an_identifier_query_has_look_alikes_in_the_corpus():
    """Error codes, flags, hosts and runbooks come in families, as in a real knowledge
    base: a model of meaning alone cannot tell E4012 from E4021."""
    text = " ".join(chunks().values())
    for code in ("E4012", "OPS-4471", "--xq7-retain", "db-replica-03"):
        stem = re.sub(r"\d", "", code)[:4]
        assert len(set(re.findall(re.escape(stem) + r"[\w-]*", text))) >= 3, code


def test_the_public_sets_load_whole_with_every_question_s_evidence_a_message_they_hold():
    """The derived LoCoMo and REALTALK (bench/search/data/external/README.md): the counts
    its README states, and no question points at a message the set lacks."""
    from bench.search.external_sets import load

    counts = {}
    for name in ("locomo", "realtalk"):
        data = load(name)
        messages = questions = 0
        for convo in data["conversations"]:
            ids = {t[0] for s in convo["sessions"] for t in s["turns"]}
            messages += len(ids)
            assert all(t[1] in (0, 1) and t[2] for s in convo["sessions"] for t in s["turns"])
            for q in convo["questions"]:
                assert q["evidence"] and set(q["evidence"]) <= ids, q["q"]
            questions += len(convo["questions"])
        counts[name] = (len(data["conversations"]), messages, questions)
    assert counts == {"locomo": (10, 5882, 1536), "realtalk": (10, 8944, 705)}


def test_hand_written_evidence_is_read_as_the_message_ids_it_names():
    from bench.search.external_sets import _ids

    known = {f"D{s}:{n}" for s in (5, 12, 13, 20) for n in range(1, 50)}
    assert _ids(["D5:3."], known) == ["D5:3"]
    assert _ids(["D12:3-D12:5"], known) == ["D12:3", "D12:4", "D12:5"]
    assert _ids(["D5:12;D5:16", "D5:12"], known) == ["D5:12", "D5:16"]
    assert _ids(["D13:45:D20:19"], known) == ["D13:45", "D20:19"]
    assert _ids(["D99:1", "D13:4. D14:4"], known) == ["D13:4"]  # no such message: dropped
