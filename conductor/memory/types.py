"""What the server may use of the parts below memory's front door, in one list: the plain
data, stores and helpers of `conductor/` beside `MemoryServices` (`services.py`) and the
turn's data (`turn.py`), and nothing deeper. One section per part:

* the ledger (`conductor/ledger/`): each turn's prompt, id for id, with its hidden spans,
  and the Responses API's stored responses;
* the note store (`conductor/notes/`): notes, their format, the rules that refuse a write
  and the result of one;
* the search (`conductor/search/`): the hybrid index over a user's memory, its collections
  and embedders;
* the writing (`conductor/writing/`): held-back blocks in an answer, explicit commands, a
  client's writes and the background writer;
* the layers (`conductor/layers/`): a user's core, working, semantic and history layers
  and the continuous conversation's turns;
* the jobs (`conductor/cognition/`): the controller, the job table, runs and their state,
  the nightly pass;
* the storage (`conductor/storage/`): names that may be folders, the home, atomic writes.
"""

from __future__ import annotations

from conductor.cognition.backend import JobAnswer, JobBackend, JobPrompt
from conductor.cognition.controller import JobController
from conductor.cognition.job import JobCaps
from conductor.cognition.job_models import (
    INHERIT,
    JobModel,
    JobModels,
    endpoint_model,
    key_env_allowed,
)
from conductor.cognition.job_state import read_job_state
from conductor.cognition.jobs import JOBS
from conductor.cognition.nightly import nightly_loop, run_nightly, run_nightly_all
from conductor.cognition.runner import JobRun, recent_runs, run_job
from conductor.layers.conversation import (
    TIME_KIND,
    WindowBounds,
    conversation_messages,
    local_offset_minutes,
    time_line,
    turn_tokens,
)
from conductor.layers.core import CORE_FILES
from conductor.layers.inventory import (
    LAYER_NAMES,
    history_days,
    layer_entries,
    layer_file_path,
    summary,
)
from conductor.layers.paths import LayerFiles
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.layers.user_layers import UserLayers
from conductor.ledger.id_blocks import flat_ids
from conductor.ledger.records import LatestRecord, Ledger, Match, Record, Span, VisibleMessage
from conductor.ledger.stored_responses import (
    ChainBroken,
    ResponseStore,
    StoredResponse,
    new_response_id,
)
from conductor.notes import NoteStore, WriteResult
from conductor.notes.note_format import KINDS, SCOPES, STATUSES, Note, format_time, parse_time
from conductor.notes.rules import NoteCaps, Reason
from conductor.search.embedders import (
    Embedder,
    EmbedderError,
    EndpointEmbedder,
    default_embedder,
)
from conductor.search.index import MODES, Hit, SearchIndex, SyncReport
from conductor.search.sources import COLLECTIONS, Registry, SourceError
from conductor.search.stores import IndexBusy, drop_user_collections
from conductor.storage.atomic import append_line, atomic_write, remove_file
from conductor.storage.clock import utc_now
from conductor.storage.fence import FenceRefused
from conductor.storage.paths import (
    UserNameError,
    default_home,
    default_memory_root,
    user_folder,
    users_under,
    valid_session,
    valid_user,
)
from conductor.writing.block_writes import write_block
from conductor.writing.blocks import Block, BlockRefusal, BlockScanner, TextPiece, parse_block
from conductor.writing.client_writes import (
    NoteIdRequired,
    NoteNotVisible,
    WriteOp,
    note_json,
    write_note,
)
from conductor.writing.command_writes import CommandOutcome
from conductor.writing.writer import GenerationPiece, Writer, WriterRun

__all__ = [
    # the ledger
    "ChainBroken",
    "LatestRecord",
    "Ledger",
    "Match",
    "Record",
    "ResponseStore",
    "Span",
    "StoredResponse",
    "VisibleMessage",
    "flat_ids",
    "new_response_id",
    # the note store
    "KINDS",
    "Note",
    "NoteCaps",
    "NoteStore",
    "Reason",
    "SCOPES",
    "STATUSES",
    "WriteResult",
    "format_time",
    "parse_time",
    # the search
    "COLLECTIONS",
    "Embedder",
    "EmbedderError",
    "EndpointEmbedder",
    "Hit",
    "IndexBusy",
    "MODES",
    "Registry",
    "SearchIndex",
    "SourceError",
    "SyncReport",
    "default_embedder",
    "drop_user_collections",
    # the writing
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
    "note_json",
    "parse_block",
    "write_block",
    "write_note",
    # the layers
    "CORE_FILES",
    "LAYER_NAMES",
    "LayerFiles",
    "Part",
    "TIME_KIND",
    "Turn",
    "TurnMessage",
    "UserLayers",
    "WindowBounds",
    "conversation_messages",
    "history_days",
    "layer_entries",
    "layer_file_path",
    "local_offset_minutes",
    "summary",
    "time_line",
    "turn_tokens",
    # the jobs
    "INHERIT",
    "JOBS",
    "JobAnswer",
    "JobBackend",
    "JobCaps",
    "JobController",
    "JobModel",
    "JobModels",
    "JobPrompt",
    "JobRun",
    "endpoint_model",
    "key_env_allowed",
    "nightly_loop",
    "read_job_state",
    "recent_runs",
    "run_job",
    "run_nightly",
    "run_nightly_all",
    "utc_now",
    # the storage
    "FenceRefused",
    "UserNameError",
    "append_line",
    "atomic_write",
    "default_home",
    "default_memory_root",
    "remove_file",
    "user_folder",
    "users_under",
    "valid_session",
    "valid_user",
]
