"""Two public conversational memory sets written elsewhere, in the compact form committed
under `data/external/` (source, licence and derivation in its README):

* **LoCoMo** (snap-research/locomo, `data/locomo10.zip`): 10 long two-person
  conversations written by LLM agents, 5,882 messages in 272 sessions, and 1,536
  questions of categories 1-4 (single-hop, temporal, open-domain, multi-hop) whose
  evidence names the messages (`D3:12`); the 446 adversarial ones (category 5, no
  answer) are left out;
* **REALTALK** (danny911kr/REALTALK, `data/*.json`): 10 real 21-day messaging-app
  conversations between people, 8,944 messages, 728 questions whose evidence names the
  messages (ranges and lists as the annotators wrote them, read here).

A set is `{"name", "conversations": [{"id", "speakers", "sessions": [{"time", "turns":
[[dia_id, speaker index, text, time or null]]}], "questions": [{"q", "evidence",
"category"}]}]}`. A photo a message carries is its caption in brackets (what the
sets' own baselines read). `python -m bench.search.external_sets LOCOMO_ZIP_DIR
REALTALK_DATA_DIR` derives the files again from the upstream folders.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent / "data" / "external"
NAMES = ("locomo", "realtalk")
_ID = re.compile(r"D(\d+):(\d+)(?:\s*-\s*(?:D\d+:)?(\d+))?")


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


def realtalk(folder: Path) -> dict[str, Any]:
    """From the repository's `data/Chat_*.json`."""
    conversations, dropped = [], 0
    for path in sorted(folder.glob("Chat_*.json"), key=lambda p: int(p.stem.split("_")[1])):
        raw = json.loads(path.read_text())
        speakers = [raw["name"]["speaker_1"], raw["name"]["speaker_2"]]
        lower = [s.lower() for s in speakers]
        sessions = []
        for n, turns in _sessions(raw):
            start = datetime.strptime(raw[f"session_{n}_date_time"], "%d.%m.%Y, %H:%M:%S")
            sessions.append({"time": start.isoformat(timespec="minutes"), "turns": [
                [t["dia_id"], lower.index(t["speaker"].lower()), _text(t, "clean_text"),
                 datetime.strptime(t["date_time"], "%d.%m.%Y, %H:%M:%S").isoformat(
                     timespec="minutes") if t.get("date_time") else None]
                for t in turns if _text(t, "clean_text")]})
        known = {t[0] for s in sessions for t in s["turns"]}
        questions = []
        for q in raw["qa"]:
            evidence = _ids(q.get("evidence") or [], known)
            if not evidence:
                dropped += 1
                continue
            questions.append({"q": q["question"], "evidence": evidence,
                              "category": q["category"]})
        conversations.append({"id": path.stem, "speakers": speakers, "sessions": sessions,
                              "questions": questions})
    return {"name": "realtalk", "questions_dropped_no_evidence": dropped,
            "conversations": conversations}


def write(data: dict[str, Any]) -> Path:
    FOLDER.mkdir(parents=True, exist_ok=True)
    path = FOLDER / f"{data['name']}.json.gz"
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    # mtime 0: the same input derives the same bytes
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(text.encode("utf-8"))
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    for data in (locomo(Path(argv[0])), realtalk(Path(argv[1]))):
        path = write(data)
        convs = data["conversations"]
        print(f"{path}: {len(convs)} conversations, "
              f"{sum(len(s['turns']) for c in convs for s in c['sessions'])} messages, "
              f"{sum(len(c['questions']) for c in convs)} questions "
              f"({data['questions_dropped_no_evidence']} dropped: no evidence id found)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
