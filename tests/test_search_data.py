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


def test_the_public_set_loads_whole_with_every_question_s_evidence_a_message_it_holds():
    """The derived LoCoMo and MADial-Bench (bench/search/data/external/README.md): the
    counts its README states, and no question points at a message the set lacks."""
    from bench.search.external_sets import NAMES, load

    counts = {}
    for name in NAMES:
        data = load(name)
        messages = questions = 0
        for convo in data["conversations"]:
            ids = {t[0] for s in convo["sessions"] for t in s["turns"]}
            messages += len(ids)
            assert all(t[1] in range(len(convo["speakers"])) and t[2]
                       for s in convo["sessions"] for t in s["turns"])
            for q in convo["questions"]:
                assert q["evidence"] and set(q["evidence"]) <= ids, q["q"]
            questions += len(convo["questions"])
        counts[name] = (len(data["conversations"]), messages, questions)
    assert counts == {"locomo": (10, 5882, 1536), "madial": (2, 160, 160)}


# licences under which a set may be committed here and passed on (with attribution)
REDISTRIBUTABLE = ("CC BY 4.0", "CC BY-SA 4.0", "CC BY-NC 4.0", "CC0", "MIT", "Apache-2.0")


def test_every_committed_public_set_is_the_benchs_and_names_a_licence_that_lets_us_pass_it_on():
    """A data file under data/external/ is one the bench reads, and its row in the README
    beside it names a licence that allows redistribution: a set without one (REALTALK
    states none) is not committed."""
    from bench.search.external_sets import FOLDER, NAMES

    rows = {}
    for line in (FOLDER / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0].endswith(".json.gz`"):
            rows[cells[0].strip("`")] = cells[2]
    committed = sorted(p.name for p in FOLDER.iterdir() if p.name != "README.md")
    assert committed == sorted(f"{name}.json.gz" for name in NAMES)
    for name in committed:
        assert name in rows, f"{name} has no row in data/external/README.md"
        assert rows[name].startswith(REDISTRIBUTABLE), (name, rows[name])


def test_hand_written_evidence_is_read_as_the_message_ids_it_names():
    from bench.search.external_sets import _ids

    known = {f"D{s}:{n}" for s in (5, 12, 13, 20) for n in range(1, 50)}
    assert _ids(["D5:3."], known) == ["D5:3"]
    assert _ids(["D12:3-D12:5"], known) == ["D12:3", "D12:4", "D12:5"]
    assert _ids(["D5:12;D5:16", "D5:12"], known) == ["D5:12", "D5:16"]
    assert _ids(["D13:45:D20:19"], known) == ["D13:45", "D20:19"]
    assert _ids(["D99:1", "D13:4. D14:4"], known) == ["D13:4"]  # no such message: dropped


def test_a_madial_question_is_the_dialogue_before_its_test_turn_and_an_event_has_no_speaker():
    """MADial-Bench (data/external/README.md): a question is the lines before the reply
    that should recall the events, as `Name: text`; the markers are not lines; an
    archived event is indexed as written, with no `Name:` before it."""
    from bench.search.external_sets import _line, _said, load

    assert _line('<Bart>: "Hey, did you know?"\n') == "Bart: Hey, did you know?"
    assert _line("<BOD>\n") is None and _line("<EOD>\n") is None
    bart = next(c for c in load("madial")["conversations"] if c["id"] == "bart")
    first = bart["questions"][0]
    assert first["q"].startswith("Bart: Hey, did you know? I'm going to perform a magic")
    assert first["q"].endswith("I want to make it very special!")  # the line before the reply
    assert "Do you remember dancing" not in first["q"]  # the test turn itself is not in it
    assert first["evidence"] == ["M1", "M78", "M105", "M113", "M108"]
    event = next(t for s in bart["sessions"] for t in s["turns"] if t[0] == "M1")
    assert _said(bart, event) == "Bart danced at the Christmas party and felt very happy."


def test_the_union_ceiling_bounds_every_fusion_rule_and_an_oracle_order_reaches_it():
    """bench/search/ceiling.py: no rule that reorders the two rankings' hits finds more at
    10 than the best reordering of their union, and that best is reached by putting the
    evidence the union holds first. Evidence deep in both lists counts in the 50-deep
    union and not in the top 10s."""
    import random

    from bench.search import fusion
    from bench.search.ceiling import bounds
    from bench.search.held_out import Case

    deep = Case("t", "all", "1", "q", [lambda k: k == "d30", lambda k: k == "s40"])
    deep.dense = [(f"d{n}", 1 - n / 100) for n in range(50)]
    deep.sparse = [(f"s{n}", 9 - n / 10) for n in range(50)]
    assert bounds(deep) == {"either_at10": 0.0, "union10_at10": 0.0, "union50_at10": 1.0,
                            "union50_recall": 1.0}
    rng = random.Random(59)
    rules = [*fusion.transferable(), *fusion.earlier()]
    for _ in range(200):
        pool = [f"k{n}" for n in range(80)]
        gold = rng.sample(pool, rng.randint(1, 14))
        case = Case("t", "all", "1", "q", [lambda k, g=g: k == g for g in gold])
        case.dense = sorted(((k, rng.random()) for k in rng.sample(pool, 50)),
                            key=lambda kv: -kv[1])
        case.sparse = sorted(((k, rng.random() * 20) for k in rng.sample(pool, 50)),
                             key=lambda kv: -kv[1])
        top = bounds(case)
        assert top["either_at10"] <= top["union10_at10"] <= top["union50_at10"]
        assert top["union50_at10"] <= top["union50_recall"]
        for rule in rules:
            assert case.recall(rule.fuse(case.dense, case.sparse), 10) <= top["union50_at10"]
        union = list(dict.fromkeys(k for k, _ in [*case.dense, *case.sparse]))
        oracle = [k for k in union if k in gold] + [k for k in union if k not in gold]
        assert case.recall(oracle, 10) == top["union50_at10"]
