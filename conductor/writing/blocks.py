"""`<tandem_memory>` blocks: recognised in a stream of text deltas, parsed into requests.

    <tandem_memory op="add" scope="project" kind="gotcha">
    title: the build needs node 20
    tags: build

    npm run build fails on node 18 with "Unexpected token 'with'".
    </tandem_memory>

`BlockScanner` finds blocks whatever the split of the deltas; `parse_block` turns a
block's text into a `BlockRequest` or a `BlockRefusal` with a machine-readable reason.
A block is *not taken* (it goes out as the text it was) when it never closes, runs past
`MAX_BLOCK_CHARS`, or comes after the first `MAX_BLOCKS` of one answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from conductor.notes.note_format import KINDS, SCOPES

OPEN = "<tandem_memory"
CLOSE = "</tandem_memory>"
MAX_BLOCK_CHARS = 2000
MAX_BLOCKS = 4
OPS = ("add", "update", "archive")

_OPEN_TAG = re.compile(r'<tandem_memory((?:\s+[A-Za-z_]+="[^"<>]*")*)\s*>')
_ATTRIBUTE = re.compile(r'([A-Za-z_]+)="([^"<>]*)"')


@dataclass(frozen=True)
class BlockRequest:
    op: str
    scope: str | None
    kind: str | None
    title: str | None
    tags: tuple[str, ...]
    body: str
    note_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class BlockRefusal:
    reason: str  # malformed_block, missing_title, unknown_kind, unknown_scope, unknown_op...
    detail: str = ""


@dataclass(frozen=True)
class TextPiece:
    """Text that goes to the client as it is."""

    text: str


@dataclass(frozen=True)
class Block:
    """One closed block within the limits: its whole text, to be handed to the store."""

    raw: str
    index: int  # 0-based position among this answer's blocks


@dataclass
class BlockScanner:
    """Feed text deltas; get text to pass on and closed blocks, in order."""

    max_chars: int = MAX_BLOCK_CHARS
    max_blocks: int = MAX_BLOCKS
    _pending: str = ""
    _in_block: bool = False
    _blocks_seen: int = field(default=0)

    @property
    def holding(self) -> bool:
        """True while text is held back (a block, or what may start one)."""
        return bool(self._pending)

    @property
    def held(self) -> str:
        return self._pending

    def feed(self, text: str) -> list[TextPiece | Block]:
        self._pending += text
        events: list[TextPiece | Block] = []
        while self._step(events):
            pass
        return _merge_text(events)

    def finish(self) -> list[TextPiece | Block]:
        """End of the answer: an unclosed block, or a partial tag, goes out as text."""
        rest, self._pending, self._in_block = self._pending, "", False
        return [TextPiece(rest)] if rest else []

    def _step(self, events: list[TextPiece | Block]) -> bool:
        text = self._pending
        if not self._in_block:
            at = text.find(OPEN)
            if at < 0:
                keep = _partial_suffix(text, OPEN)
                if len(text) > keep:
                    events.append(TextPiece(text[: len(text) - keep]))
                self._pending = text[len(text) - keep:]
                return False
            if at > 0:
                events.append(TextPiece(text[:at]))
            self._pending = text[at:]
            self._in_block = True
            return True
        end = text.find(CLOSE)
        if end >= 0 and end + len(CLOSE) <= self.max_chars:
            raw, self._pending = text[: end + len(CLOSE)], text[end + len(CLOSE):]
            self._in_block = False
            index = self._blocks_seen
            self._blocks_seen += 1
            events.append(Block(raw, index) if index < self.max_blocks else TextPiece(raw))
            return True
        if len(text) > self.max_chars or (end >= 0):
            # Too long to be a block: it goes out as text, and scanning resumes after the
            # opening marker so a later, well-formed block can still be found.
            events.append(TextPiece(text[: len(OPEN)]))
            self._pending = text[len(OPEN):]
            self._in_block = False
            return True
        return False


def _partial_suffix(text: str, tag: str) -> int:
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def _merge_text(events: list[TextPiece | Block]) -> list[TextPiece | Block]:
    merged: list[TextPiece | Block] = []
    for event in events:
        if isinstance(event, TextPiece) and merged and isinstance(merged[-1], TextPiece):
            merged[-1] = TextPiece(merged[-1].text + event.text)
        elif not (isinstance(event, TextPiece) and not event.text):
            merged.append(event)
    return merged


def parse_block(raw: str) -> BlockRequest | BlockRefusal:
    """A closed block's text -> what it asks of the store, or why it cannot be taken."""
    match = _OPEN_TAG.match(raw)
    if match is None or not raw.endswith(CLOSE):
        return BlockRefusal("malformed_block", "the opening tag or its attributes are malformed")
    attributes = dict(_ATTRIBUTE.findall(match.group(1)))
    unknown = set(attributes) - {"op", "scope", "kind", "id", "reason"}
    if unknown:
        return BlockRefusal("malformed_block", f"unknown attribute {sorted(unknown)[0]}")
    op = attributes.get("op", "add")
    if op not in OPS:
        return BlockRefusal("unknown_op", op)
    inner = raw[match.end(): -len(CLOSE)]
    header, body = _split_header(inner)
    scope, kind = attributes.get("scope"), attributes.get("kind")
    if scope is not None and scope not in SCOPES:
        return BlockRefusal("unknown_scope", scope)
    if kind is not None and kind not in KINDS:
        return BlockRefusal("unknown_kind", kind)
    note_id = attributes.get("id") or None
    title = header.get("title") or None
    if op == "add":
        if scope is None or kind is None:
            return BlockRefusal("malformed_block", "add needs scope and kind")
        if title is None:
            return BlockRefusal("missing_title")
    if op in ("update", "archive") and note_id is None:
        return BlockRefusal("missing_id", f"{op} needs an id")
    if op == "archive" and not attributes.get("reason"):
        return BlockRefusal("missing_reason", "archive needs a reason")
    tags = tuple(t.strip() for t in header.get("tags", "").split(",") if t.strip())
    return BlockRequest(op=op, scope=scope, kind=kind, title=title, tags=tags, body=body,
                        note_id=note_id, reason=attributes.get("reason") or None)


def _split_header(inner: str) -> tuple[dict[str, str], str]:
    """`title:`/`tags:` lines up to the first blank line, then the body."""
    lines = inner.strip("\n").split("\n")
    header: dict[str, str] = {}
    at = 0
    while at < len(lines) and lines[at].strip():
        key, sep, value = lines[at].partition(":")
        if not sep or key.strip().lower() not in ("title", "tags"):
            break  # no blank line between header and body: the body starts here
        header[key.strip().lower()] = value.strip()
        at += 1
    return header, "\n".join(lines[at:]).strip()
