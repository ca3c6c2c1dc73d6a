"""One history turn as versioned JSON: what was said, in order, and what was hidden.

Schema 2 (current)::

    {"schema_version": 2, "seq": 12, "time": "2026-11-30T10:15:00Z",
     "utc_offset_minutes": 60, "interrupted": false,
     "messages": [
       {"role": "user", "parts": [{"type": "text", "text": "..."},
                                  {"type": "hidden", "kind": "notes", "note_ids": ["..."]}]},
       {"role": "assistant", "parts": [{"type": "reasoning", "text": "..."},
                                       {"type": "text", "text": "..."},
                                       {"type": "tool_call", "id": "...", "name": "...",
                                        "arguments": "{...}"},
                                       {"type": "status", "text": "\\n\\n› remembered: ..."}]},
       {"role": "tool", "parts": [{"type": "tool_result", "id": "...", "text": "..."}]}]}

Hidden memory context is kept by reference (kind and note ids), never by text. Schema 1,
the first form, was flat (``user`` and ``assistant`` strings); it is upgraded on read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

SCHEMA_VERSION = 2
PART_TYPES = ("text", "reasoning", "tool_call", "tool_result", "hidden", "status")
ROLES = ("user", "assistant", "tool")


class TurnFormatError(ValueError):
    """A turn file that cannot be read as a turn; the message says why (no content)."""


class NewerSchemaError(TurnFormatError):
    """A turn written by a newer Tandem: left where it is, not loaded."""


@dataclass(frozen=True)
class Part:
    type: str
    text: str = ""
    name: str | None = None  # tool_call
    arguments: str | None = None  # tool_call, the exact JSON string the model wrote
    call_id: str | None = None  # tool_call, tool_result
    kind: str | None = None  # hidden
    note_ids: tuple[str, ...] = ()  # hidden

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.type in ("text", "reasoning", "tool_result", "status"):
            out["text"] = self.text
        if self.type == "tool_call":
            out.update(name=self.name, arguments=self.arguments)
        if self.call_id is not None:
            out["id"] = self.call_id
        if self.type == "hidden":
            out.update(kind=self.kind, note_ids=list(self.note_ids))
        return out


@dataclass(frozen=True)
class TurnMessage:
    role: str
    parts: tuple[Part, ...]

    def text(self) -> str:
        """What the model wrote (assistant) or the person said (user)."""
        return "".join(p.text for p in self.parts if p.type in ("text", "tool_result"))

    def shown(self) -> str:
        """The text as the client was shown it: the model's text and the status lines."""
        return "".join(p.text for p in self.parts if p.type in ("text", "status"))

    def tool_calls(self) -> list[Part]:
        return [p for p in self.parts if p.type == "tool_call"]

    def reasoning(self) -> str:
        return "".join(p.text for p in self.parts if p.type == "reasoning")


@dataclass(frozen=True)
class Turn:
    seq: int
    time: datetime  # UTC
    utc_offset_minutes: int  # the user's local time offset when they wrote
    messages: tuple[TurnMessage, ...]
    interrupted: bool = False  # the client left before the answer was whole
    schema_version: int = field(default=SCHEMA_VERSION, compare=False)

    @property
    def user_text(self) -> str:
        return next((m.text() for m in self.messages if m.role == "user"), "")

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "seq": self.seq,
            "time": format_utc(self.time),
            "utc_offset_minutes": self.utc_offset_minutes,
            "interrupted": self.interrupted,
            "messages": [{"role": m.role, "parts": [p.to_json() for p in m.parts]}
                         for m in self.messages],
        }


def format_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_turn(raw: Any) -> Turn:
    """A turn from its decoded JSON, upgraded to the current schema; TurnFormatError."""
    if not isinstance(raw, dict):
        raise TurnFormatError("not a JSON object")
    version = raw.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TurnFormatError("no schema_version")
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(f"schema_version {version} is newer than {SCHEMA_VERSION}")
    if version == 1:
        raw = _upgrade_from_1(raw)
    elif version != SCHEMA_VERSION:
        raise TurnFormatError(f"unknown schema_version {version}")
    return Turn(
        seq=_int(raw, "seq"),
        time=_time(raw.get("time")),
        utc_offset_minutes=_int(raw, "utc_offset_minutes", default=0),
        messages=tuple(_message(m) for m in _list(raw, "messages")),
        interrupted=bool(raw.get("interrupted", False)),
        schema_version=version,
    )


def _upgrade_from_1(raw: dict[str, Any]) -> dict[str, Any]:
    """Schema 1: ``{"seq", "time", "user": str, "assistant": str}``."""
    messages = []
    for role in ("user", "assistant"):
        text = raw.get(role)
        if text is not None:
            if not isinstance(text, str):
                raise TurnFormatError(f"schema 1: '{role}' is not a string")
            messages.append({"role": role, "parts": [{"type": "text", "text": text}]})
    return {"seq": raw.get("seq"), "time": raw.get("time"), "utc_offset_minutes": 0,
            "messages": messages}


def _int(raw: dict[str, Any], key: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TurnFormatError(f"'{key}' is not an integer")
    return value


def _list(raw: dict[str, Any], key: str) -> list[Any]:
    value = raw.get(key)
    if not isinstance(value, list):
        raise TurnFormatError(f"'{key}' is not a list")
    return value


def _time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TurnFormatError("'time' is not a string")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise TurnFormatError("'time' is not an ISO time") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _message(raw: Any) -> TurnMessage:
    if not isinstance(raw, dict) or raw.get("role") not in ROLES:
        raise TurnFormatError("a message without a known role")
    return TurnMessage(raw["role"], tuple(_part(p) for p in _list(raw, "parts")))


def _part(raw: Any) -> Part:
    if not isinstance(raw, dict) or raw.get("type") not in PART_TYPES:
        raise TurnFormatError("a part without a known type")
    kind = raw["type"]
    strings = {k: raw.get(k) for k in ("text", "name", "arguments", "id", "kind")}
    if any(v is not None and not isinstance(v, str) for v in strings.values()):
        raise TurnFormatError(f"a {kind} part with a field that is not a string")
    note_ids = raw.get("note_ids", [])
    if not isinstance(note_ids, list) or not all(isinstance(i, str) for i in note_ids):
        raise TurnFormatError("a hidden part whose note_ids are not strings")
    if kind == "tool_call" and (strings["name"] is None or strings["arguments"] is None):
        raise TurnFormatError("a tool_call part without name or arguments")
    return Part(type=kind, text=strings["text"] or "", name=strings["name"],
                arguments=strings["arguments"], call_id=strings["id"], kind=strings["kind"],
                note_ids=tuple(note_ids))
