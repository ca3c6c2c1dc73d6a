"""The public conversational memory sets written elsewhere, in the compact form committed
under `data/external/` (source, licence and derivation in its README), and their layout
as a user's history turns:

* **LoCoMo** (snap-research/locomo, `data/locomo10.zip`, CC BY-NC 4.0): 10 long
  two-person conversations written by LLM agents, 5,882 messages in 272 sessions, and
  1,536 questions of categories 1-4 (single-hop, temporal, open-domain, multi-hop) whose
  evidence names the messages (`D3:12`); the 446 adversarial ones (category 5, no
  answer) are left out.
* **MADial-Bench** (hejunqing/MADial-Bench, `data/en/`, MIT): a memory archive of 160
  dated events of two users' past (76 and 84), and 160 dialogues whose next reply should
  recall some of them. A question is the dialogue before that reply; its evidence, the
  archive entries the annotators marked relevant. The archive entries are the messages
  (one a turn, each in the session of its date), so the evidence is a message as in
  LoCoMo, but an archived event, not a line someone said.

Only sets whose licence lets us redistribute them are committed: REALTALK, read in an
earlier round, states no licence and was taken out (README beside the data).

A set is `{"name", "conversations": [{"id", "speakers", "sessions": [{"time", "turns":
[[dia_id, speaker index, text, time or null]]}], "questions": [{"q", "evidence",
"category"}]}]}`; a speaker named "" (MADial's archive) prefixes nothing. A photo a
LoCoMo message carries is its caption in brackets (what the set's own baselines read).
`python -m bench.search.external_sets NAME DIR` derives a set's file again from its
upstream folder (`locomo`: the unzipped `locomo10_v2/`; `madial`: `data/en/`).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.search.held_out import Case, _rank, _turn_side
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.search.chunks import split_markdown
from conductor.search.index import SearchIndex, chunk_text
from conductor.storage.atomic import atomic_write

FOLDER = Path(__file__).resolve().parent / "data" / "external"
NAMES = ("locomo", "madial")
# how a conversation becomes history turns: as the served history holds a chat ("pairs":
# two messages a turn, the first as the user's side), or the bench's variants of it
LAYOUTS = {
    "pairs": "two messages a turn, a section a side (as served)",
    "single": "one message a turn",
    "neighbour": "two messages a turn, with the message before the pair and the one "
                 "after it",
}
# the layout a set is read in by default: an archive entry is a turn of its own (two
# unrelated events in one turn would read as one exchange)
DEFAULT_LAYOUT = {"madial": "single"}
_ID = re.compile(r"D(\d+):(\d+)(?:\s*-\s*(?:D\d+:)?(\d+))?")
# a MADial dialogue line: `<Bart>: "Hey, did you know? ..."`
_LINE = re.compile(r'^<([^>]+)>:\s*(.*)$', re.S)


def load(name: str) -> dict[str, Any]:
    with gzip.open(FOLDER / f"{name}.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def _sessions(raw: dict[str, Any]) -> list[tuple[int, list[dict]]]:
    found = [(int(k.split("_")[1]), v) for k, v in raw.items()
             if re.fullmatch(r"session_\d+", k) and isinstance(v, list) and v]
    return sorted(found)


def _text(turn: dict[str, Any], key: str) -> str:
    text = " ".join(str(turn.get(key) or "").split())
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]".strip() if caption else text


def _ids(evidence: list[str], known: set[str]) -> list[str]:
    """The annotators' evidence as message ids: "D5:3.", "D12:3-D12:5", "D5:12;D5:16",
    "D13:45:D20:19" each read as the ids they name; ids no message has are dropped."""
    out: list[str] = []
    for entry in evidence:
        # "D13:45:D20:19" is two ids; a range's end may repeat the session ("D12:3-D12:5")
        for session, first, last in _ID.findall(entry.replace(":D", " D")):
            for n in range(int(first), int(last or first) + 1):
                key = f"D{session}:{n}"
                if key in known and key not in out:
                    out.append(key)
    return out


def locomo(folder: Path) -> dict[str, Any]:
    """From the unzipped `data/multimodal_dialog/locomo10_v2/*.json`."""
    conversations, dropped = [], 0
    for path in sorted(folder.glob("*.json"), key=lambda p: int(p.stem)):
        raw = json.loads(path.read_text())
        speakers = [raw["speaker_a"], raw["speaker_b"]]
        sessions = []
        for n, turns in _sessions(raw):
            when = datetime.strptime(raw[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y")
            sessions.append({"time": when.isoformat(timespec="minutes"), "turns": [
                [t["dia_id"], speakers.index(t["speaker"]), _text(t, "text"), None]
                for t in turns]})
        known = {t[0] for s in sessions for t in s["turns"]}
        questions = []
        for q in raw["qa"]:
            evidence = _ids(q.get("evidence") or [], known)
            if q["category"] == 5:
                continue
            if not evidence:
                dropped += 1
                continue
            questions.append({"q": q["question"], "evidence": evidence,
                              "category": q["category"]})
        conversations.append({"id": path.stem, "speakers": speakers, "sessions": sessions,
                              "questions": questions})
    return {"name": "locomo", "questions_dropped_no_evidence": dropped,
            "conversations": conversations}


def _line(raw: str) -> str | None:
    """A MADial dialogue line as `Name: text` (its quotes dropped); None for the
    `<BOD>`/`<EOD>` markers."""
    found = _LINE.match(raw.strip())
    if not found:
        return None
    return f"{found[1]}: {' '.join(found[2].strip().strip(chr(34)).split())}"


def madial(folder: Path) -> dict[str, Any]:
    """From MADial-Bench's `data/en/` (`MADial-Bench-en-memory.json` and
    `-dialogue.json`, a JSON object a line). Each user's archive is the events that name
    them (every event names Bart or Lisa, and only the dialogues of that user cite it);
    a question is the dialogue's lines before its first test turn, as the set's own
    memory-recall scripts embed it."""
    memory = {}
    for line in (folder / "MADial-Bench-en-memory.json").read_text().splitlines():
        if line.strip():
            key, entry = next(iter(json.loads(line).items()))
            memory[int(key)] = entry
    dialogues = [json.loads(line) for line in
                 (folder / "MADial-Bench-en-dialogue.json").read_text().splitlines()
                 if line.strip()]
    names = {1: "Bart", 2: "Lisa"}
    conversations = []
    for user, name in names.items():
        own = sorted((entry["time"], n) for n, entry in memory.items()
                     if name in entry["event"])
        sessions: list[dict[str, Any]] = []
        for day, n in own:
            if not sessions or sessions[-1]["time"] != f"{day}T00:00":
                sessions.append({"time": f"{day}T00:00", "turns": []})
            sessions[-1]["turns"].append(
                [f"M{n}", 0, " ".join(memory[n]["event"].split()), None])
        known = {t[0] for s in sessions for t in s["turns"]}
        questions = []
        for d in (d for d in dialogues if d["user-id"] == user):
            said = [_line(raw) for raw in d["dialogue"][:d["test-turn"][0]]]
            evidence = [f"M{n}" for n in d["relevant-id"] if f"M{n}" in known]
            questions.append({"q": "\n".join(x for x in said if x), "evidence": evidence,
                              "category": "recall"})
        conversations.append({"id": name.lower(), "speakers": [""], "sessions": sessions,
                              "questions": questions})
    dropped = sum(not q["evidence"] for c in conversations for q in c["questions"])
    for convo in conversations:
        convo["questions"] = [q for q in convo["questions"] if q["evidence"]]
    return {"name": "madial", "questions_dropped_no_evidence": dropped,
            "conversations": conversations}


def _said(convo: dict[str, Any], message: list) -> str:
    name = convo["speakers"][message[1]]
    return f"{name}: {message[2]}" if name else message[2]


def lay_out(root: Path, user: str, convo: dict[str, Any], sub: str = "",
            layout: str = "pairs") -> dict[str, tuple[str, str]]:
    """The conversation as the user's history turns (under `sub`, a folder of its own
    where one user holds several), in one of `LAYOUTS`; {message id: (turn file, side)}."""
    folder = root / "layers" / user / "history" / "turns"
    where: dict[str, tuple[str, str]] = {}
    seq = 0
    size = 1 if layout == "single" else 2
    flat = [m for session in convo["sessions"] for m in session["turns"]]
    at = 0  # the first message of the group in `flat`
    for session in convo["sessions"]:
        start = datetime.fromisoformat(session["time"]).replace(tzinfo=UTC)
        turns = session["turns"]
        for n in range(0, len(turns), size):
            group = turns[n:n + size]
            seq += 1
            own_time = group[0][3]
            moment = (datetime.fromisoformat(own_time).replace(tzinfo=UTC) if own_time
                      else start + timedelta(minutes=n))
            texts = [_said(convo, message) for message in group]
            if layout == "neighbour":
                # the served turn gives each side the other side's words; this gives the
                # pair the line before it and the line after it too
                if at > 0:
                    texts[0] = f"(before: {_said(convo, flat[at - 1])})\n{texts[0]}"
                if len(group) == 2 and at + 2 < len(flat):
                    texts[1] = f"{texts[1]}\n(after: {_said(convo, flat[at + 2])})"
            at += len(group)
            messages = tuple(TurnMessage(role, (Part("text", text),))
                             for role, text in zip(("user", "assistant"), texts, strict=False))
            rel = f"{sub}{moment:%Y/%m/%d}/{seq:08d}.json"
            atomic_write(folder / rel, json.dumps(Turn(seq, moment, 0, messages).to_json())
                         + "\n", durable=False)
            for side, message in zip(("user", "assistant"), group, strict=False):
                where[message[0]] = (rel, side)
    return where


def public(name: str, root: Path, layout: str | None = None,
           limit: int | None = None) -> list[tuple[str, dict[str, Any], dict]]:
    """The set's conversations (the first `limit`, or all) laid out under `root`, one user
    each, in `layout` (the set's `DEFAULT_LAYOUT`, else pairs as served): (user,
    conversation, where each message went)."""
    layout = layout or DEFAULT_LAYOUT.get(name, "pairs")
    return [(f"{name}-{c['id']}", c, lay_out(root, f"{name}-{c['id']}", c, layout=layout))
            for c in load(name)["conversations"][:limit]]


def rank_public(name: str, root: Path, laid: list, embedder,
                say: Callable[[str], None] = print) -> tuple[list[Case], dict]:
    """Each question's dense and BM25 rankings (and the served hybrid) over its own
    conversation's index."""
    cases: list[Case] = []
    turns = 0
    for user, convo, where in laid:
        index = SearchIndex(root, user, embedder)
        turns += index.sync().files_seen
        for q in convo["questions"]:
            case = Case(name, "all", str(q["category"]), q["q"],
                        [_turn_side(*where[e]) for e in q["evidence"]])
            _rank(index, case, "history")
            cases.append(case)
        index.close()
    say(f"{name}: {len(cases)} questions over {turns} turns")
    return cases, {"turns": turns, "questions": len(cases),
                   "dropped_no_evidence": load(name)["questions_dropped_no_evidence"]}


def texts_of(root: Path, users: list[str]) -> list[str]:
    """Every chunk text the users' indexes will embed (as `SearchIndex.sync` cuts them)."""
    out = []
    for user in users:
        for source in SearchIndex(root, user, None).registry().sources:
            for _, path in source.files():
                out += [chunk_text(c) for c in split_markdown(
                    source.read(path), whole=source.type == "chunked_markdown_tree")]
    return out


def write(data: dict[str, Any]) -> Path:
    FOLDER.mkdir(parents=True, exist_ok=True)
    path = FOLDER / f"{data['name']}.json.gz"
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    # mtime 0: the same input derives the same bytes
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(text.encode("utf-8"))
    return path


DERIVE = {"locomo": locomo, "madial": madial}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in DERIVE:
        print(__doc__)
        return 2
    for data in (DERIVE[argv[0]](Path(argv[1])),):
        path = write(data)
        convs = data["conversations"]
        print(f"{path}: {len(convs)} conversations, "
              f"{sum(len(s['turns']) for c in convs for s in c['sessions'])} messages, "
              f"{sum(len(c['questions']) for c in convs)} questions "
              f"({data['questions_dropped_no_evidence']} dropped: no evidence id found)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
