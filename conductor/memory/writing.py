"""How notes get written: held-back blocks in an answer, explicit commands, a client's
writes, and the background writer.

Part of memory's front door (`conductor.memory`): what the server may use of
`conductor/writing/`, and nothing deeper."""

from __future__ import annotations

from conductor.writing.block_writes import write_block
from conductor.writing.blocks import Block, BlockRefusal, BlockScanner, TextPiece, parse_block
from conductor.writing.client_writes import (
    NoteIdRequired,
    NoteNotVisible,
    WriteOp,
    note_json,
    write_note,
)
from conductor.writing.command_writes import CommandOutcome, carry_out
from conductor.writing.commands import recognise
from conductor.writing.writer import GenerationPiece, Writer, WriterRun

__all__ = [
    "Block",
    "BlockRefusal",
    "BlockScanner",
    "CommandOutcome",
    "GenerationPiece",
    "NoteIdRequired",
    "NoteNotVisible",
    "TextPiece",
    "WriteOp",
    "Writer",
    "WriterRun",
    "carry_out",
    "note_json",
    "parse_block",
    "recognise",
    "write_block",
    "write_note",
]
